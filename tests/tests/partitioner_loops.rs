//! The partitioner on control flow and nested `jit` (issue 6, `partition/loops.rs`), with 8
//! simulated CPU devices: a `scan` over `xs` split along a non-scanned dim, `fori_loop` /
//! `while` bodies with a matmul against a replicated weight or a reduction over an unsplit
//! dim run per device on blocks (no all-gather); a body that is not shard-local runs whole
//! and the plan's notes say which path each loop took and why; a nested `jit` is inlined
//! into the partition. Every sharded result is compared with the unsharded call.

use jax::prelude::*;
use jaxrepl_tests::{assert_close_f32, eight_cpu_devices, host_array, put};

fn mesh8() -> Mesh {
    make_mesh(&[8], &["i"], None).unwrap()
}

/// The compiled text of `f` on `args`: the partitioned plan's header, notes and program.
fn plan_text<A: jax::trace::pytree::Pytree, R: jax::trace::pytree::Pytree>(f: &jax::transform::Jitted<A, R>, args: impl jax::trace::pytree::Args<A>) -> String {
    f.lower(args).unwrap().compile().unwrap().as_text()
}

fn control_notes(text: &str) -> Vec<String> {
    text.lines().filter_map(|l| l.strip_prefix("// control flow: ")).map(|l| {
        // Drop the source location (file:line:col) for golden text.
        match (l.find(" at "), l.find(": ")) {
            (Some(a), Some(b)) if a < b => format!("{}{}", &l[..a], &l[b..]),
            _ => l.to_string(),
        }
    }).collect()
}

/// `scan` over xs f32[6,16] split along dim 1 with a carry f32[16] split alike: the body
/// runs per device; carry and ys equal the unsharded call bitwise (elementwise only) and
/// keep the split. (A carry starting whole is `carry_sharding_is_fixed_by_its_initial_value`.)
#[test]
fn scan_over_xs_split_along_a_non_scanned_dim_runs_per_device() {
    eight_cpu_devices();
    let mesh = mesh8();
    let (xs, _) = host_array(&[6, 16], 31);
    let f = jit(|(c, xs): (Array, Array)| -> Result<(Array, Array)> {
        lax::scan(|(c, x): (Array, Array)| -> Result<(Array, Array)> {
            let c2 = &c * 0.5 + x.tanh();
            Ok((c2.clone(), &c2 * 2.0))
        }, c, xs, None, false, 1)
    });
    let c0 = put(&jnp::zeros(&[16], DType::F32), &mesh, P!("i"));
    let pxs = put(&xs, &mesh, P!(None, "i"));
    let before = jax::sharding::partitioned_calls();
    let (c, ys) = f.call((&c0, &pxs)).unwrap();
    assert!(jax::sharding::partitioned_calls() > before);
    let (wc, wys) = f.call((&c0, &xs)).unwrap();
    assert_eq!(c.to_vec::<f32>().unwrap(), wc.to_vec::<f32>().unwrap());
    assert_eq!(ys.to_vec::<f32>().unwrap(), wys.to_vec::<f32>().unwrap());
    assert_eq!(typeof_(&ys).to_string(), "float32[6,16@i]");
    assert_eq!(typeof_(&c).to_string(), "float32[16@i]");
    // `%explain` names the path of the call's loop (the call traced above).
    let report = jax::magic::explain().0;
    assert!(report.lines().any(|l| l.starts_with("    partitioned: scan at ") && l.ends_with(": runs per device (its body is shard-local on blocks)")), "{report}");
    let text = plan_text(&f, (&c0, &pxs));
    assert_eq!(control_notes(&text), vec!["scan: runs per device (its body is shard-local on blocks)".to_string()]);
    assert!(text.contains("f32[6,2]") && !text.contains("all_gather["), "{text}");
    // xs split along the scanned dim: JAX's error over an Explicit axis; over an Auto one,
    // all-gathered along it first, then per device.
    let (xs2, _) = host_array(&[8, 16], 32);
    let e = f.call((&c0, &put(&xs2, &mesh, P!("i", None)))).unwrap_err();
    assert!(e.message.starts_with("0th dimension of all xs should be replicated. Got P('i', None)"), "{e}");
    let auto = make_mesh(&[8], &["i"], Some(&[AxisType::Auto])).unwrap();
    let (c0, p2) = (put(&jnp::zeros(&[16], DType::F32), &auto, P!("i")), put(&xs2, &auto, P!("i", None)));
    let (c, ys) = f.call((&c0, &p2)).unwrap();
    let (wc, wys) = f.call((&c0, &xs2)).unwrap();
    assert_eq!(c.to_vec::<f32>().unwrap(), wc.to_vec::<f32>().unwrap());
    assert_eq!(ys.to_vec::<f32>().unwrap(), wys.to_vec::<f32>().unwrap());
}

/// `fori_loop` with a matmul against a replicated weight (rows split) and a `while` whose
/// body reduces over the unsplit dim: per device, no all-gather, equal to the unsharded call.
#[test]
fn loop_bodies_with_matmuls_and_local_reductions_run_per_device() {
    eight_cpu_devices();
    let mesh = mesh8();
    let (x, _) = host_array(&[32, 16], 33);
    let (w, _) = host_array(&[16, 16], 34);
    let f = jit(|(x, w): (Array, Array)| -> Result<Array> {
        // The loop index broadcast to h's shape (a whole value the body makes): broadcast
        // straight to the block.
        lax::fori_loop(0, 5, |(i, h): (Array, Array)| -> Result<Array> {
            let b = jnp::broadcast_to(&(i.astype(DType::F32) * 0.01), &[32, 16])?;
            Ok(h.matmul(&w).tanh() + b)
        }, x)
    });
    let px = put(&x, &mesh, P!("i", None));
    let z = f.call((&px, &w)).unwrap();
    assert_close_f32(&z, &f.call((&x, &w)).unwrap(), 1e-6);
    assert_eq!(typeof_(&z).to_string(), "float32[32@i,16]");
    let text = plan_text(&f, (&px, &w));
    assert_eq!(control_notes(&text), vec!["scan: runs per device (its body is shard-local on blocks)".to_string()]);
    assert!(text.contains("dot_general") && text.contains("f32[4,16]") && !text.contains("all_gather["), "{text}");
    // while: x - 0.5 * mean over the unsplit dim, until a counter reaches 4.
    let g = jit(|x: Array| -> Result<Array> {
        let (_, y) = lax::while_loop(
            |(i, _): (Array, Array)| i.lt(4),
            |(i, y): (Array, Array)| -> Result<(Array, Array)> {
                let m = jnp::expand_dims(&jnp::mean(&y, Some(&[1]))?, 1)?;
                Ok((i + 1, &y - &(m * 0.5)))
            },
            (jnp::zeros(&[], DType::I32), x),
        )?;
        Ok(y)
    });
    let z = g.call(&px).unwrap();
    assert_close_f32(&z, &g.call(&x).unwrap(), 1e-6);
    let text = plan_text(&g, &px);
    assert_eq!(control_notes(&text), vec!["while: runs per device (its body is shard-local on blocks)".to_string()]);
    assert!(!text.contains("all_gather["), "{text}");
}

/// A body reducing over the split dim runs per device with the all-reduce inside it (a
/// `psum` per iteration, no all-gather), equal to the unsharded call; a body that is not
/// shard-local (a reshape moving the split dim) runs whole, right, and the note says why.
#[test]
fn a_body_reducing_a_split_dim_all_reduces_inside_it() {
    eight_cpu_devices();
    let mesh = mesh8();
    let (x, _) = host_array(&[32, 4], 35);
    let f = jit(|x: Array| -> Result<Array> {
        lax::fori_loop(0, 3, |(_, h): (Array, Array)| -> Result<Array> { Ok(&h / &(h.abs().sum() + 1.0)) }, x)
    });
    let px = put(&x, &mesh, P!("i", None));
    let z = f.call(&px).unwrap();
    assert_close_f32(&z, &f.call(&x).unwrap(), 1e-6);
    assert_eq!(typeof_(&z).to_string(), "float32[32@i,4]");
    let text = plan_text(&f, &px);
    assert_eq!(control_notes(&text), vec!["scan: runs per device (its body is shard-local on blocks); 1 all-reduce inside its body, per iteration".to_string()]);
    assert!(!text.contains("all_gather[") && text.contains("pure_callback[") && text.contains("callback=<function psum>"), "{text}");
    // max over the split dim: pmax inside the body.
    let g = jit(|x: Array| -> Result<Array> {
        lax::fori_loop(0, 2, |(_, h): (Array, Array)| -> Result<Array> { Ok(&h - &(jnp::max(&h, None)? * 0.5)) }, x)
    });
    assert_close_f32(&g.call(&px).unwrap(), &g.call(&x).unwrap(), 1e-6);
    assert!(plan_text(&g, &px).contains("callback=<function pmax>"));
    // Not shard-local: a reshape merging the split dim into a smaller minor position (on an
    // `Auto` mesh: under `Explicit` axes that reshape is a sharding type error, also in a
    // loop body). The result still carries the carry's sharding.
    let auto = make_mesh(&[8], &["i"], Some(&[AxisType::Auto])).unwrap();
    let apx = put(&x, &auto, P!("i", None));
    let h = jit(|x: Array| -> Result<Array> {
        lax::fori_loop(0, 2, |(_, h): (Array, Array)| -> Result<Array> { Ok(jnp::transpose(&h, None)?.reshape(&[32, 4]) * 0.5) }, x)
    });
    let hz = h.call(&apx).unwrap();
    assert_close_f32(&hz, &h.call(&x).unwrap(), 1e-6);
    assert_eq!(format!("{:?}", hz.sharding().unwrap().spec()), "Some(P('i', None))");
    let e = h.call(&px).unwrap_err();
    assert_eq!(e.kind, ErrorKind::ShardingType, "{e}");
    let notes = control_notes(&plan_text(&h, &apx));
    assert_eq!(notes.len(), 1);
    assert!(notes[0].starts_with("scan: runs whole (operands all-gathered): "), "{notes:?}");
}

/// A matmul contracting the split dim inside a loop body (`a` f32[4,16] split along its
/// columns, `b` f32[16] split alike, over an `Auto` mesh): each device's partial product is
/// all-reduced inside the body, the whole carry stays whole; equal to the unsharded call.
#[test]
fn a_body_contracting_a_split_dim_all_reduces_inside_it() {
    eight_cpu_devices();
    let mesh = make_mesh(&[8], &["i"], Some(&[AxisType::Auto])).unwrap();
    let (a, _) = host_array(&[4, 16], 40);
    let (b, _) = host_array(&[16], 41);
    let c0 = jnp::ones(&[4], DType::F32) * 0.1;
    let f = jit(|(c, a, b): (Array, Array, Array)| -> Result<Array> {
        lax::fori_loop(0, 3, move |(_, c): (Array, Array)| -> Result<Array> { Ok((&c + &a.matmul(&(&b * &c.sum()))).tanh()) }, c)
    });
    let (pa, pb) = (put(&a, &mesh, P!(None, "i")), put(&b, &mesh, P!("i")));
    let z = f.call((&c0, &pa, &pb)).unwrap();
    assert_close_f32(&z, &f.call((&c0, &a, &b)).unwrap(), 1e-5);
    let text = plan_text(&f, (&c0, &pa, &pb));
    assert_eq!(control_notes(&text), vec!["scan: runs per device (its body is shard-local on blocks); 1 all-reduce inside its body, per iteration".to_string()], "{text}");
    assert!(!text.contains("all_gather["), "{text}");
}

/// A nested `jit` over sharded arrays is inlined into the partition: the outer program
/// has no `jit` equation and no all-gather; values equal the unsharded call.
#[test]
fn nested_jit_is_inlined_into_the_partition() {
    eight_cpu_devices();
    let mesh = mesh8();
    let (x, _) = host_array(&[16, 8], 36);
    let (w, _) = host_array(&[8, 8], 37);
    let inner = jit(|(x, w): (Array, Array)| -> Result<Array> { Ok(x.matmul(&w).sin() * 2.0) });
    let outer = jit(move |(x, w): (Array, Array)| -> Result<Array> { Ok(inner.call((&x, &w))? + 1.0) });
    let px = put(&x, &mesh, P!("i", None));
    let z = outer.call((&px, &w)).unwrap();
    assert_close_f32(&z, &outer.call((&x, &w)).unwrap(), 1e-6);
    assert_eq!(typeof_(&z).to_string(), "float32[16@i,8]");
    let text = plan_text(&outer, (&px, &w));
    let program: Vec<&str> = text.lines().filter(|l| l.starts_with("//   ")).collect();
    assert!(!program.iter().any(|l| l.contains("jit[") || l.contains("all_gather[")), "{text}");
    assert!(program.iter().any(|l| l.contains("dot_general") && l.contains("f32[2,8]")), "{text}");
}

/// Nested control flow on split values: a `fori_loop` whose body runs an inner
/// `fori_loop` (a matmul against a replicated weight) and a `cond` on the (whole) loop
/// index runs per device, the nested bodies retyped to blocks; a `jit`ted helper called in
/// the body is traced into it and partitioned alike. Equal to the unsharded call.
#[test]
fn nested_loops_and_conds_with_local_bodies_run_per_device() {
    eight_cpu_devices();
    let mesh = mesh8();
    let (x, _) = host_array(&[32, 8], 38);
    let (w, _) = host_array(&[8, 8], 39);
    let helper = jit(|h: Array| -> Result<Array> { Ok(h.tanh() * 0.9) });
    let f = jit(move |(x, w): (Array, Array)| -> Result<Array> {
        let helper = helper.clone();
        lax::fori_loop(0, 3, move |(i, h): (Array, Array)| -> Result<Array> {
            let w = w.clone();
            let h = lax::fori_loop(0, 2, move |(_, g): (Array, Array)| -> Result<Array> { Ok(g.matmul(&w).sin()) }, h)?;
            let h = lax::cond(&i.gt(0), |g: Array| g * 2.0, |g: Array| g - 1.0, h)?;
            helper.call(h)
        }, x)
    });
    let px = put(&x, &mesh, P!("i", None));
    let z = f.call((&px, &w)).unwrap();
    assert_close_f32(&z, &f.call((&x, &w)).unwrap(), 1e-6);
    assert_eq!(typeof_(&z).to_string(), "float32[32@i,8]");
    let text = plan_text(&f, (&px, &w));
    assert_eq!(control_notes(&text), vec!["scan: runs per device (its body is shard-local on blocks)".to_string()]);
    assert!(!text.contains("all_gather["), "{text}");
    // The nested loop's body works on 4-row blocks.
    assert!(text.contains("f32[4,8] = dot_general"), "{text}");
    // A nested loop reducing over the split dim: its all-reduce inside the nested body.
    let g = jit(|x: Array| -> Result<Array> {
        lax::fori_loop(0, 2, |(_, h): (Array, Array)| -> Result<Array> {
            lax::fori_loop(0, 2, |(_, g): (Array, Array)| -> Result<Array> { Ok(&g / &(g.abs().sum() + 1.0)) }, h)
        }, x)
    });
    assert_close_f32(&g.call(&px).unwrap(), &g.call(&x).unwrap(), 1e-6);
    assert_eq!(control_notes(&plan_text(&g, &px)), vec!["scan: runs per device (its body is shard-local on blocks); 1 all-reduce inside its body, per iteration".to_string()]);
}

/// A loop carry whose initial value is whole but whose body combines it with a split
/// operand (and the reverse: a split initial value the body gives back whole). In JAX a
/// carry's type is fixed by its initial value: under `Explicit` axes the body's differing
/// result sharding is a type error (JAX's carry-mismatch text, naming the loop's line);
/// under `Auto` axes the loop still runs per device and the result comes back with the
/// initial value's sharding, which the jaxpr's type, `typeof`, `sharding()` and
/// `visualize_array_sharding` all show; values equal the unsharded call.
#[test]
fn carry_sharding_is_fixed_by_its_initial_value() {
    eight_cpu_devices();
    let (xs, _) = host_array(&[6, 16], 42);
    let (w, _) = host_array(&[16], 43);
    let c0 = jnp::zeros(&[16], DType::F32);
    let scan = jit(|(c, xs): (Array, Array)| -> Result<(Array, Array)> {
        lax::scan(|(c, x): (Array, Array)| -> Result<(Array, Array)> {
            let c2 = &c * 0.5 + x.tanh();
            Ok((c2.clone(), &c2 * 2.0))
        }, c, xs, None, false, 1)
    });
    let scan_line = line!() - 5;
    let fori = jit(|(c, w): (Array, Array)| -> Result<Array> {
        lax::fori_loop(0, 3, move |(_, h): (Array, Array)| -> Result<Array> { Ok((&h + &w).sin()) }, c)
    });
    let whl = jit(|(c, w): (Array, Array)| -> Result<Array> {
        let (_, y) = lax::while_loop(
            |(i, _): (Array, Array)| i.lt(3),
            |(i, y): (Array, Array)| -> Result<(Array, Array)> { Ok((i + 1, (&y * &w).cos())) },
            (jnp::zeros(&[], DType::I32), c),
        )?;
        Ok(y)
    });
    // Explicit axes: JAX's carry type error.
    let mesh = mesh8();
    let (pxs, pw) = (put(&xs, &mesh, P!(None, "i")), put(&w, &mesh, P!("i")));
    let e = scan.call((&c0, &pxs)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Type, "{e}");
    assert!(e.message.starts_with(
        "scan body function carry input and carry output must have equal types, but they differ:\n\nThe input carry component carry[0] has type float32[16] but the corresponding output carry component has type float32[16@i].\n\nRevise the function so that all output types match the corresponding input types. For shardings: give"
    ), "{}", e.message);
    let loc = e.location.as_ref().expect("the loop's line");
    assert!(loc.file.ends_with("partitioner_loops.rs") && loc.line == scan_line, "{loc:?}");
    let e = fori.call((&c0, &pw)).unwrap_err();
    assert!(e.kind == ErrorKind::Type && e.message.starts_with("scan body function carry input") && e.message.contains("carry[1] has type float32[16] but the corresponding output carry component has type float32[16@i]"), "{e}");
    let e = whl.call((&c0, &pw)).unwrap_err();
    assert!(e.kind == ErrorKind::Type && e.message.starts_with("while_loop body function carry input") && e.message.contains("carry[1] has type float32[16] but"), "{e}");
    // The reverse: a split initial value the body gives back whole (a broadcast of its sum).
    let back = jit(|c: Array| -> Result<Array> {
        lax::fori_loop(0, 2, |(_, h): (Array, Array)| -> Result<Array> { jnp::broadcast_to(&(h.sum() * 0.1), &[16]) }, c)
    });
    let pc = put(&w, &mesh, P!("i"));
    let e = back.call(&pc).unwrap_err();
    assert!(e.kind == ErrorKind::Type && e.message.contains("has type float32[16@i] but the corresponding output carry component has type float32[16]."), "{e}");
    // Resharding the initial value as the body gives it back: runs, sharded as its init.
    let pc0 = put(&c0, &mesh, P!("i"));
    let (c, ys) = scan.call((&pc0, &pxs)).unwrap();
    let (wc, wys) = scan.call((&c0, &xs)).unwrap();
    assert_eq!(c.to_vec::<f32>().unwrap(), wc.to_vec::<f32>().unwrap());
    assert_eq!(ys.to_vec::<f32>().unwrap(), wys.to_vec::<f32>().unwrap());
    assert_eq!(typeof_(&c).to_string(), "float32[16@i]");

    // Auto axes: runs (per device), results with the initial value's sharding.
    let auto = make_mesh(&[8], &["i"], Some(&[AxisType::Auto])).unwrap();
    let (axs, aw) = (put(&xs, &auto, P!(None, "i")), put(&w, &auto, P!("i")));
    let replicated = put(&c0, &auto, P!());
    let split = put(&w, &auto, P!("i"));
    let check = |y: &Array, want: &Array, like: &Array, spec: &str, jaxpr: &str| {
        assert_close_f32(y, want, 1e-6);
        assert_eq!(format!("{:?}", y.sharding().unwrap().spec()), spec);
        assert_eq!(typeof_(y).to_string(), typeof_(like).to_string());
        assert_eq!(debug::visualize_array_sharding(y).unwrap().to_string(), debug::visualize_array_sharding(like).unwrap().to_string());
        assert!(jaxpr.contains("f32[16]"), "{jaxpr}");
    };
    let before = jax::sharding::partitioned_calls();
    let (c, ys) = scan.call((&c0, &axs)).unwrap();
    assert!(jax::sharding::partitioned_calls() > before);
    check(&c, &wc, &replicated, "Some(P())", &scan.trace((&c0, &axs)).unwrap().jaxpr().to_string());
    assert_eq!(ys.to_vec::<f32>().unwrap(), wys.to_vec::<f32>().unwrap());
    assert_eq!(format!("{:?}", ys.sharding().unwrap().spec()), "Some(P(None, 'i'))");
    assert_eq!(control_notes(&plan_text(&scan, (&c0, &axs))), vec!["scan: runs per device (its body is shard-local on blocks)".to_string()]);
    let y = fori.call((&c0, &aw)).unwrap();
    check(&y, &fori.call((&c0, &w)).unwrap(), &replicated, "Some(P())", &fori.trace((&c0, &aw)).unwrap().jaxpr().to_string());
    let y = whl.call((&c0, &aw)).unwrap();
    check(&y, &whl.call((&c0, &w)).unwrap(), &replicated, "Some(P())", &whl.trace((&c0, &aw)).unwrap().jaxpr().to_string());
    let apc = put(&w, &auto, P!("i"));
    let y = back.call(&apc).unwrap();
    check(&y, &back.call(&w).unwrap(), &split, "Some(P('i',))", &back.trace(&apc).unwrap().jaxpr().to_string());
}
