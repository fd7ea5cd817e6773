//! The SPMD partitioner (issue 6) with 8 simulated CPU devices (own test binary:
//! `jax_num_cpu_devices` is set before the backend starts). Every program runs on sharded
//! arguments and is compared with the same jitted function on unsharded (single-device)
//! inputs (f32 tolerance); the result shardings are the propagated ones (or those asked by
//! `out_shardings`); the compiled text shows the per-device program and its collectives.

use jax::prelude::*;
use jaxrepl_tests::{assert_close_f32, eight_cpu_devices, host_array, put};

fn close(a: &Array, b: &Array) {
    assert_close_f32(a, b, 1e-4);
}

/// Every shard holds its block of `want` (row-major 2-D).
fn shards_hold_blocks(z: &Array, want: &Array) {
    let w = want.to_vec::<f32>().unwrap();
    let cols = want.shape()[1];
    for s in z.addressable_shards().unwrap() {
        assert_eq!(s.data.devices().unwrap(), vec![s.device]);
        let (r0, r1) = s.index[0].unwrap_or((0, want.shape()[0]));
        let (c0, c1) = s.index[1].unwrap_or((0, cols));
        let got = s.data.to_vec::<f32>().unwrap();
        let mut i = 0;
        for r in r0..r1 {
            for c in c0..c1 {
                let q = w[r * cols + c];
                assert!((got[i] - q).abs() <= 1e-4 * (1.0 + q.abs()), "device {}: ({r},{c}) {} vs {q}", s.device.id, got[i]);
                i += 1;
            }
        }
    }
}

fn spec_of(a: &Array) -> String {
    format!("{:?}", a.sharding().unwrap().spec().cloned().unwrap_or_default())
}

fn mesh8() -> Mesh {
    make_mesh(&[8], &["i"], None).unwrap()
}

fn mesh8_auto() -> Mesh {
    make_mesh(&[8], &["i"], Some(&[AxisType::Auto])).unwrap()
}

/// Step 1: a row-sharded lhs times a replicated rhs is one local matmul per device: no
/// gather, no collective; the result is row-sharded (JAX's bench program).
#[test]
fn row_sharded_matmul_is_local() {
    eight_cpu_devices();
    let mesh = mesh8();
    let (a, _) = host_array(&[64, 32], 1);
    let (b, _) = host_array(&[32, 16], 2);
    let (pa, pb) = (put(&a, &mesh, P!("i", None)), put(&b, &mesh, P!()));
    let f = jit(|(p, q): (Array, Array)| p.matmul(&q)).out_shardings(vec![NamedSharding::new(&mesh, P!("i", None)).unwrap()]);
    let before = jax::sharding::partitioned_calls();
    let z = f.call((&pa, &pb)).unwrap();
    assert!(jax::sharding::partitioned_calls() > before, "runs partitioned");
    let want = jit(|(p, q): (Array, Array)| p.matmul(&q)).call((&a, &b)).unwrap();
    close(&z, &want);
    assert_eq!(typeof_(&z).to_string(), "float32[64@i,16]");
    shards_hold_blocks(&z, &want);
    let text = jit(|(p, q): (Array, Array)| p.matmul(&q)).lower((&pa, &pb)).unwrap().compile().unwrap().as_text();
    assert!(text.contains("path: partitioned"), "{text}");
    // %compile shows the same per-device program; %lower the global module.
    let magic = jax::magic::compile(|| f.call((&pa, &pb))).unwrap().0;
    assert!(magic.contains("path: partitioned") && magic.contains("f32[8,32]"), "{magic}");
    let lowered = jax::magic::lower(|| f.call((&pa, &pb))).unwrap().0;
    assert!(lowered.contains("tensor<64x32xf32>"), "{lowered}");
    assert!(text.contains("0 collectives per device"), "{text}");
    assert!(text.contains("dot_general") && text.contains("f32[8,32]"), "the per-device program works on [8,32] blocks:\n{text}");
    // An uncommitted unsharded rhs is read whole by every device.
    let z2 = f.call((&pa, &b)).unwrap();
    close(&z2, &want);
    // Mixed with elementwise producers and consumers, and a bias broadcast from a
    // replicated vector (sliced on each device).
    let (bias, _) = host_array(&[16], 3);
    let g = |(p, q, c): (Array, Array, Array)| ((p * 2.0).matmul(&q) + 1.0 + c).tanh();
    let z = jit(g).call((&pa, &pb, &bias)).unwrap();
    let want = jit(g).call((&a, &b, &bias)).unwrap();
    close(&z, &want);
    assert_eq!(typeof_(&z).to_string(), "float32[64@i,16]");
    shards_hold_blocks(&z, &want);
    let text = jit(g).lower((&pa, &pb, &bias)).unwrap().compile().unwrap().as_text();
    assert!(text.contains("0 collectives per device"), "{text}");
    assert!(text.contains("f32[8,16] = broadcast_in_dim[broadcast_dimensions=(1,)]"), "the bias is broadcast to the block:\n{text}");
    assert!(!text.contains("dynamic_slice"), "{text}");
    // A chain of partitioned calls stays partitioned and right.
    let h = jit(|(p, q): (Array, Array)| (p.matmul(&q)).sin());
    let (sq, _) = host_array(&[32, 32], 4);
    let psq = put(&sq, &mesh, P!());
    let z3 = h.call((&h.call((&pa, &psq)).unwrap(), &psq)).unwrap();
    close(&z3, &h.call((&h.call((&a, &sq)).unwrap(), &sq)).unwrap());
}

/// Step 2: a contraction over a dim sharded on both operands is a local product plus a
/// psum (replicated result), or a reduce_scatter when `out_shardings` splits the result.
#[test]
fn sharded_contraction_all_reduces() {
    eight_cpu_devices();
    let mesh = mesh8_auto();
    let (a, _) = host_array(&[16, 64], 5);
    let (b, _) = host_array(&[64, 24], 6);
    let (pa, pb) = (put(&a, &mesh, P!(None, "i")), put(&b, &mesh, P!("i", None)));
    let mm = |(p, q): (Array, Array)| p.matmul(&q);
    let want = jit(mm).call((&a, &b)).unwrap();
    let f = jit(mm);
    let z = f.call((&pa, &pb)).unwrap();
    close(&z, &want);
    assert_eq!(spec_of(&z), "P()");
    let text = f.lower((&pa, &pb)).unwrap().compile().unwrap().as_text();
    assert!(text.contains("path: partitioned") && text.contains("psum[axes=('i',)"), "{text}");
    let magic = jax::magic::compile(|| f.call((&pa, &pb))).unwrap().0;
    assert!(magic.contains("psum[axes=('i',)"), "{magic}");
    // An unsharded call shows the whole program's module.
    assert!(!jax::magic::compile(|| f.call((&a, &b))).unwrap().0.contains("path:"));
    assert!(!text.contains("all_gather"), "{text}");
    // out_shardings splits the summed result: reduce_scatter instead of psum.
    let fs = jit(mm).out_shardings(vec![NamedSharding::new(&mesh, P!("i", None)).unwrap()]);
    let zs = fs.call((&pa, &pb)).unwrap();
    close(&zs, &want);
    assert_eq!(spec_of(&zs), "P('i', None)");
    shards_hold_blocks(&zs, &want);
    // x.T @ x with x row-sharded: the transpose leaves the contracting dims split alike.
    let (x, _) = host_array(&[64, 8], 7);
    let px = put(&x, &mesh, P!("i", None));
    let gram = |x: Array| x.t().matmul(&x);
    close(&jit(gram).call(&px).unwrap(), &jit(gram).call(&x).unwrap());
    // Two mesh axes: contract over Y, keep rows split over X.
    let m2 = make_mesh(&[4, 2], &["X", "Y"], Some(&[AxisType::Auto, AxisType::Auto])).unwrap();
    let (c, _) = host_array(&[8, 16], 8);
    let (d, _) = host_array(&[16, 4], 9);
    let z = jit(mm).call((&put(&c, &m2, P!("X", "Y")), &put(&d, &m2, P!("Y", None)))).unwrap();
    let want = jit(mm).call((&c, &d)).unwrap();
    close(&z, &want);
    assert_eq!(spec_of(&z), "P('X', None)");
    shards_hold_blocks(&z, &want);
}

/// Step 2: reductions over a sharded dim: local reduce + psum/pmax/pmin.
#[test]
fn reductions_over_sharded_dims_all_reduce() {
    eight_cpu_devices();
    let mesh = mesh8();
    let (x, _) = host_array(&[64, 6], 10);
    let px = put(&x, &mesh, P!("i", None));
    let sum0 = |x: Array| jnp::sum(&(x.clone() * 3.0), Some(&[0])).unwrap();
    let f = jit(sum0);
    let z = f.call(&px).unwrap();
    close(&z, &jit(sum0).call(&x).unwrap());
    assert_eq!(typeof_(&z).to_string(), "float32[6]");
    let text = f.lower(&px).unwrap().compile().unwrap().as_text();
    assert!(text.contains("psum[axes=('i',)"), "{text}");
    let mx = |x: Array| jnp::max(&x, Some(&[0])).unwrap() - jnp::min(&x, None).unwrap();
    let g = jit(mx);
    close(&g.call(&px).unwrap(), &jit(mx).call(&x).unwrap());
    let text = g.lower(&px).unwrap().compile().unwrap().as_text();
    assert!(text.contains("pmax[axes=('i',)") && text.contains("pmin[axes=('i',)"), "{text}");
    // A total sum (a 0-d result) and a sum over the unsharded dim (no collective).
    let tot = |x: Array| x.sum() + 1.0;
    close(&jit(tot).call(&px).unwrap(), &jit(tot).call(&x).unwrap());
    let rows = |x: Array| jnp::sum(&x, Some(&[1])).unwrap();
    let zr = jit(rows).call(&px).unwrap();
    close(&zr, &jit(rows).call(&x).unwrap());
    assert_eq!(typeof_(&zr).to_string(), "float32[64@i]");
    assert!(jit(rows).lower(&px).unwrap().compile().unwrap().as_text().contains("0 collectives"));
    // out_shardings splits a summed result: reduce_scatter.
    let (y, _) = host_array(&[64, 16], 11);
    let py = put(&y, &mesh, P!("i", None));
    let fs = jit(|x: Array| jnp::sum(&x, Some(&[0])).unwrap()).out_shardings(vec![NamedSharding::new(&mesh, P!("i")).unwrap()]);
    let zs = fs.call(&py).unwrap();
    close(&zs, &jnp::sum(&y, Some(&[0])).unwrap());
    assert_eq!(spec_of(&zs), "P('i',)");
    for s in zs.addressable_shards().unwrap() {
        assert_eq!(s.data.shape(), vec![2]);
    }
}

/// Step 3: an equation that cannot use its operands' sharding gets them all-gathered on
/// the per-device program; the rest of the program stays partitioned.
#[test]
fn other_equations_all_gather_their_operands() {
    eight_cpu_devices();
    let mesh = mesh8();
    let (x, _) = host_array(&[64, 4], 12);
    let px = put(&x, &mesh, P!("i", None));
    // cumsum along the sharded dim needs the whole column.
    let prog = |x: Array| (jnp::cumsum(&x.sin(), Some(0)).unwrap() * 2.0).exp();
    let f = jit(prog);
    let z = f.call(&px).unwrap();
    let want = jit(prog).call(&x).unwrap();
    close(&z, &want);
    assert_eq!(spec_of(&z), format!("{:?}", P!("i", None)));
    shards_hold_blocks(&z, &want);
    let text = f.lower(&px).unwrap().compile().unwrap().as_text();
    assert!(text.contains("path: partitioned") && text.contains("all_gather"), "{text}");
    // A sort over the sharded dim, then a matmul and a reduction: one partitioned program.
    let (w, _) = host_array(&[4, 8], 13);
    let mixed = |(x, w): (Array, Array)| {
        let s = jnp::sort(&x, 0).unwrap();
        jnp::sum(&(s.matmul(&w).tanh() + &x.matmul(&w)), Some(&[1])).unwrap()
    };
    let before = jax::sharding::partitioned_calls();
    let z = jit(mixed).call((&px, &w)).unwrap();
    assert!(jax::sharding::partitioned_calls() > before);
    close(&z, &jit(mixed).call((&x, &w)).unwrap());
    // A reshape merging the sharded major dim keeps it split; a flip gathers.
    let r = |x: Array| jnp::flip(&x.reshape(&[256]), None).unwrap() + 1.0;
    close(&jit(r).call(&px).unwrap(), &jit(r).call(&x).unwrap());
}

/// The lowered text keeps the global program with its shardings; errors in a device's
/// run reach the result; a 2-D mesh with rows and columns split.
#[test]
fn lowered_text_and_two_axis_meshes() {
    eight_cpu_devices();
    let mesh = make_mesh(&[4, 2], &["X", "Y"], None).unwrap();
    let (a, _) = host_array(&[8, 8], 14);
    let pa = put(&a, &mesh, P!("X", "Y"));
    let f = jit(|x: Array| (x.clone() * &x).sin());
    let lowered = f.lower(&pa).unwrap().as_text();
    assert!(lowered.contains("sdy.sharding = #sdy.sharding<@mesh, [{\"X\"}, {\"Y\"}]>"), "{lowered}");
    let z = f.call(&pa).unwrap();
    let want = jit(|x: Array| (x.clone() * &x).sin()).call(&a).unwrap();
    close(&z, &want);
    assert_eq!(typeof_(&z).to_string(), "float32[8@X,8@Y]");
    shards_hold_blocks(&z, &want);
    // Row sums over a [X, Y] layout: psum over Y only.
    let rs = jit(|x: Array| jnp::sum(&x, Some(&[1])).unwrap());
    let z = rs.call(&pa).unwrap();
    close(&z, &jnp::sum(&a, Some(&[1])).unwrap());
    assert_eq!(typeof_(&z).to_string(), "float32[8@X]");
    assert!(rs.lower(&pa).unwrap().compile().unwrap().as_text().contains("psum[axes=('Y',)"));
}

/// `Compiled::call` runs the same partitioned program; callers on two threads calling
/// programs with collectives at once do not deadlock (one submission order for all
/// device workers) and get right values.
#[test]
fn compiled_calls_and_concurrent_callers() {
    eight_cpu_devices();
    let mesh = mesh8();
    let (x, _) = host_array(&[32, 8], 15);
    let px = put(&x, &mesh, P!("i", None));
    let colsum = |x: Array| jnp::sum(&x.cos(), Some(&[0])).unwrap();
    let want = jit(colsum).call(&x).unwrap();
    let compiled = jit(colsum).lower(&px).unwrap().compile().unwrap();
    let before = jax::sharding::partitioned_calls();
    close(&compiled.call(&px).unwrap(), &want);
    assert!(jax::sharding::partitioned_calls() > before);
    let threads: Vec<_> = (0..2)
        .map(|t| {
            let (px, want) = (px.clone(), want.clone());
            std::thread::spawn(move || {
                let f = jit(colsum);
                let g = jit(|x: Array| jnp::max(&x.cos(), Some(&[0])).unwrap());
                for k in 0..6 {
                    if (k + t) % 2 == 0 {
                        close(&f.call(&px).unwrap(), &want);
                    } else {
                        g.call(&px).unwrap().block_until_ready().unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// `reshard` inside `jit` stages a `sharding_constraint` equation: the propagation and the
/// partitioner lay the value out as asked (all_gather of the rows, local slice of the
/// columns); values are unchanged, and grad goes through `with_sharding_constraint`, its
/// form on `Auto` axes (on `Explicit` ones it is JAX's error that names `reshard`).
#[test]
fn sharding_constraint_inside_jit() {
    eight_cpu_devices();
    let mesh = mesh8();
    let (x, _) = host_array(&[16, 8], 16);
    let px = put(&x, &mesh, P!("i", None));
    let cols = NamedSharding::new(&mesh, P!(None, "i")).unwrap();
    let c1 = cols.clone();
    let e = jit(move |x: Array| with_sharding_constraint(&(x * 2.0), c1.clone())).call(&px).unwrap_err();
    assert_eq!(
        e.to_string(),
        "ValueError: The spec of NamedSharding passed to with_sharding_constraint can only refer to Auto axes of the mesh. Got spec=P(None, 'i') and mesh=AbstractMesh('i': 8, axis_types=(Explicit,), device_kind=cpu, num_cores=None, platform=cpu). You probably meant to use `reshard` API?"
    );
    let c2 = cols.clone();
    let f = move |x: Array| reshard(&(x * 2.0), c2.clone()).unwrap().sin();
    let jaxpr = make_jaxpr(f.clone(), &px).unwrap().to_string();
    // Typed as JAX types values on an explicit mesh: the split moves from dim 0 to dim 1.
    assert!(jaxpr.contains("b:f32[16@i,8] = mul a 2.0:f32[]\n    c:f32[16,8@i] = sharding_constraint[\n      sharding=NamedSharding(mesh=Mesh('i': 8, axis_types=(Explicit,)), spec=P(None, 'i'), memory_kind=device)\n    ] b"), "{jaxpr}");
    let z = jit(f.clone()).call(&px).unwrap();
    let want = jit(f.clone()).call(&x).unwrap();
    close(&z, &want);
    assert_eq!(typeof_(&z).to_string(), "float32[16,8@i]");
    shards_hold_blocks(&z, &want);
    let text = jit(f.clone()).lower(&px).unwrap().compile().unwrap().as_text();
    // The split moves from dim 0 to dim 1: one all_to_all.
    assert!(text.contains("all_to_all[") && text.contains("f32[16,1] = sin"), "{text}");
    // grad (over Auto axes: explicit ones reject the mixed layouts the transpose makes):
    // the constraint's transpose is the constraint.
    let am = mesh8_auto();
    let ca = NamedSharding::new(&am, P!(None, "i")).unwrap();
    let fa = move |x: Array| with_sharding_constraint(&(x * 2.0), ca.clone()).unwrap().sin();
    let gf = move |x: Array| grad(|y: Array| fa(y).sum())(x);
    close(&jit(gf.clone()).call(&put(&x, &am, P!("i", None))).unwrap(), &jit(gf).call(&x).unwrap());
}

/// A pipeline over stage meshes of other devices than the first ones (notebook 201-04):
/// each stage's mesh holds devices 2k and 2k+1, and the partitioned program runs there.
#[test]
fn stage_meshes_on_later_devices() {
    eight_cpu_devices();
    let devs = devices();
    let stage_meshes: Vec<Mesh> = (0..4).map(|i| Mesh::new(&devs[2 * i..2 * i + 2], &[2], &["x"], vec![AxisType::Explicit]).unwrap()).collect();
    let step = jit(|x: Array| (x * 2.0 + 1.0).tanh());
    let mut h = jnp::arange(8.0) / 8.0;
    let mut want = h.clone();
    for m in &stage_meshes {
        h = put(&h, m, P!("x"));
        h = step.call(&h).unwrap();
        want = step.call(&want).unwrap();
        assert_eq!(h.sharding().unwrap().mesh(), Some(m));
    }
    close(&h, &want);
}

/// Moving a split from one dim to another (`out_shardings` / `reshard` from P('i', None)
/// to P(None, 'i')) is one `all_to_all`, not an all_gather and a slice; values equal the
/// unsharded call and every shard holds its block.
#[test]
fn moving_a_split_is_all_to_all() {
    eight_cpu_devices();
    let mesh = mesh8();
    let (x, _) = host_array(&[16, 32], 21);
    let px = put(&x, &mesh, P!("i", None));
    let cols = NamedSharding::new(&mesh, P!(None, "i")).unwrap();
    let f = jit(|x: Array| x * 2.0 + 1.0).out_shardings(vec![cols.clone()]);
    let want = jit(|x: Array| x * 2.0 + 1.0).call(&x).unwrap();
    let z = f.call(&px).unwrap();
    close(&z, &want);
    assert_eq!(typeof_(&z).to_string(), "float32[16,32@i]");
    shards_hold_blocks(&z, &want);
    let text = jax::magic::compile(|| f.call(&px)).unwrap().0;
    assert!(text.contains("all_to_all[") && !text.contains("all_gather[") && !text.contains("dynamic_slice"), "{text}");
    // `reshard` inside jit, and back.
    let c2 = cols.clone();
    let g = move |x: Array| reshard(&(x.sin()), c2.clone()).unwrap() * 3.0;
    let z = jit(g.clone()).call(&px).unwrap();
    let want = jit(g.clone()).call(&x).unwrap();
    close(&z, &want);
    shards_hold_blocks(&z, &want);
    let text = jit(g).lower(&px).unwrap().compile().unwrap().as_text();
    assert!(text.contains("all_to_all["), "{text}");
    let pc = put(&x, &mesh, P!(None, "i"));
    let rows = NamedSharding::new(&mesh, P!("i", None)).unwrap();
    let h = jit(|x: Array| x.exp()).out_shardings(vec![rows]);
    let z = h.call(&pc).unwrap();
    close(&z, &jit(|x: Array| x.exp()).call(&x).unwrap());
    assert_eq!(typeof_(&z).to_string(), "float32[16@i,32]");
}

/// `with_sharding_constraint` under `vmap` keeps its constraint with the batch dim
/// inserted unsharded (JAX's batching rule without `spmd_axis_name`).
#[test]
fn sharding_constraint_under_vmap() {
    eight_cpu_devices();
    let mesh = mesh8_auto();
    let (x, host) = host_array(&[8, 16], 22);
    let ns = NamedSharding::new(&mesh, P!("i")).unwrap();
    let n2 = ns.clone();
    let f = move |v: Array| with_sharding_constraint(&(v * 2.0), n2.clone()).unwrap().sin();
    let f2 = f.clone();
    let vf = move |xs: Array| vmap(f2.clone())(xs).unwrap();
    let jaxpr = make_jaxpr(vf.clone(), &x).unwrap().to_string();
    assert!(jaxpr.contains("sharding_constraint[\n      sharding=NamedSharding(mesh=Mesh('i': 8, axis_types=(Auto,)), spec=P(None, 'i'), memory_kind=device)\n    ]"), "{jaxpr}");
    // On rows split over 'i', the constraint moves the split to the columns.
    let z = jit(vf.clone()).call(&put(&x, &mesh, P!("i", None))).unwrap();
    assert_eq!(format!("{:?}", z.sharding().unwrap().spec()), "Some(P(None, 'i'))");
    // Values: sin(2x) on the host; the eager vmap alike.
    for got in [z, vf(x.clone())] {
        for (g, h) in got.to_vec::<f32>().unwrap().iter().zip(&host) {
            assert!((*g as f64 - (2.0 * h).sin()).abs() <= 1e-6, "{g} vs {}", (2.0 * h).sin());
        }
    }
    drop(f);
}

/// A `fori_loop` (a `scan` without xs), a `while_loop` and a `cond` whose bodies are
/// elementwise over sharded values run per device on blocks (no gather); values equal the unsharded
/// call and the result keeps the operand's sharding.
#[test]
fn elementwise_loops_run_per_device() {
    eight_cpu_devices();
    let mesh = mesh8();
    let (x, _) = host_array(&[16, 8], 23);
    let (y, _) = host_array(&[16, 8], 24);
    let px = put(&x, &mesh, P!("i", None));
    let f = |(x, y): (Array, Array)| -> Result<Array> {
        let (a, _) = lax::fori_loop(0, 6, |(i, (a, b)): (Array, (Array, Array))| -> Result<(Array, Array)> {
            let t = i.astype(DType::F32) * 0.1;
            Ok((&a * 0.9 + (&b * &t).sin(), b.clone()))
        }, (x, y))?;
        Ok(a)
    };
    // y whole (replicated): sliced locally to x's layout.
    let z = jit(f).call((&px, &y)).unwrap();
    let want = jit(f).call((&x, &y)).unwrap();
    close(&z, &want);
    assert_eq!(typeof_(&z).to_string(), "float32[16@i,8]");
    shards_hold_blocks(&z, &want);
    let text = jit(f).lower((&px, &y)).unwrap().compile().unwrap().as_text();
    assert!(text.contains("path: partitioned") && text.contains("f32[2,8]") && text.contains("scan[") && !text.contains("all_gather["), "{text}");
    // A while loop with a traced trip count.
    let g = |(x, n): (Array, Array)| -> Result<Array> {
        lax::fori_loop_dynamic(&jnp::zeros(&[], DType::I32), &n, |(_, c): (Array, Array)| -> Result<Array> { Ok(c.cos() + 0.5) }, x)
    };
    let n = jnp::array(&[5i32]).reshape(&[]);
    let z = jit(g).call((&px, &n)).unwrap();
    close(&z, &jit(g).call((&x, &n)).unwrap());
    assert_eq!(typeof_(&z).to_string(), "float32[16@i,8]");
    let text = jit(g).lower((&px, &n)).unwrap().compile().unwrap().as_text();
    assert!(text.contains("while[") && !text.contains("all_gather["), "{text}");
    // A cond on a global predicate (a psum'd sum: the same on every device) with
    // elementwise branches runs per device too; both branches taken.
    let c = |x: Array| -> Result<Array> { lax::cond(&x.sum().gt(0.0), |x: Array| x.sin() * 2.0, |x: Array| x.cos() - 1.0, x) };
    for arg in [x.clone(), -&x] {
        let parg = put(&arg, &mesh, P!("i", None));
        let z = jit(c).call(&parg).unwrap();
        close(&z, &jit(c).call(&arg).unwrap());
        let text = jit(c).lower(&parg).unwrap().compile().unwrap().as_text();
        assert!(text.contains("cond[") && !text.contains("all_gather[") && text.contains("psum["), "{text}");
        assert_eq!(typeof_(&z).to_string(), "float32[16@i,8]");
    }
    // A loop body that is not elementwise (a reduction) still runs whole, and right.
    let h = |x: Array| -> Result<Array> { lax::fori_loop(0, 3, |(_, c): (Array, Array)| -> Result<Array> { Ok(&c - c.mean()) }, x) };
    close(&jit(h).call(&px).unwrap(), &jit(h).call(&x).unwrap());
}

/// `%lower` (and `%compile --stage lowered`) of a jitted call that ran partitioned show
/// the global module with its Shardy annotations, as `Lowered::as_text` does, also after
/// the same function ran unsharded (a fresh user saw the unannotated module).
#[test]
fn lower_magic_of_a_partitioned_call_shows_the_shardings() {
    eight_cpu_devices();
    let mesh = make_mesh(&[4, 2], &["X", "Y"], None).unwrap();
    let (a, _) = host_array(&[8, 4], 14);
    let (w, _) = host_array(&[4, 6], 3);
    let mm = jit(|(a, b): (Array, Array)| a.matmul(&b));
    mm.call((&a, &w)).unwrap();
    let pa = put(&a, &mesh, P!("X", None));
    let want = mm.lower((&pa, &w)).unwrap().as_text();
    assert!(want.contains("%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{\"X\"}, {}]>}"), "{want}");
    assert!(want.contains("sdy.mesh @mesh = <[\"X\"=4, \"Y\"=2]>"), "{want}");
    assert_eq!(jax::magic::lower(|| mm.call((&pa, &w))).unwrap().to_string(), want);
    assert_eq!(jax::magic::compile_stage("lowered", || mm.call((&pa, &w))).unwrap().to_string(), want);
    // The unsharded call still shows the plain module.
    let plain = jax::magic::lower(|| mm.call((&a, &w))).unwrap().to_string();
    assert!(!plain.contains("sdy.sharding"), "{plain}");
}

/// `reshard` changing a layout inside `jit` costs one collective: from
/// P('i', None) to replicated one `all_gather`; from P('i', None) to P(None, 'i') one
/// `all_to_all` (no all_gather); also when the constrained value is used by several
/// equations and is a result. On a (4,2) mesh, P('X', 'Y') to replicated (or to
/// P('Y', 'X')) gathers both dims with one `all_gather` over ('X', 'Y') (then local
/// reshapes, a transpose and, for P('Y', 'X'), slices), not one all_gather per dim.
/// Values equal the unsharded call, results keep the layout the constraint gives.
#[test]
fn a_layout_changing_sharding_constraint_is_one_collective() {
    eight_cpu_devices();
    let mesh = mesh8();
    let m2 = make_mesh(&[4, 2], &["X", "Y"], None).unwrap();
    let (x, _) = host_array(&[16, 8], 47);
    let count = |text: &str, what: &str| text.lines().filter(|l| l.starts_with("//   ") && l.contains(what)).count();
    for (m, from, spec, ty, gathers, to_alls) in [
        (&mesh, P!("i", None), P!(), "float32[16,8]", 1, 0),
        (&mesh, P!("i", None), P!(None, "i"), "float32[16,8@i]", 0, 1),
        (&m2, P!("X", "Y"), P!(), "float32[16,8]", 1, 0),
        (&m2, P!("X", "Y"), P!("Y", "X"), "float32[16@Y,8@X]", 1, 0),
        (&m2, P!("X", None), P!(None, "X"), "float32[16,8@X]", 0, 1),
    ] {
        let px = put(&x, m, from);
        let s = NamedSharding::new(m, spec).unwrap();
        let f = jit(move |x: Array| -> Result<(Array, Array)> {
            let y = reshard(&(x * 2.0), s.clone())?;
            Ok((y.sin() + &y.cos(), y.exp()))
        });
        let (a, b) = f.call(&px).unwrap();
        let (wa, wb) = f.call(&x).unwrap();
        close(&a, &wa);
        close(&b, &wb);
        assert_eq!(typeof_(&a).to_string(), ty);
        assert_eq!(typeof_(&b).to_string(), ty);
        shards_hold_blocks(&a, &wa);
        let text = f.lower(&px).unwrap().compile().unwrap().as_text();
        assert_eq!((count(&text, "all_gather["), count(&text, "all_to_all[")), (gathers, to_alls), "{ty}:\n{text}");
    }
}
