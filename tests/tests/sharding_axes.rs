//! Mixed sharding modes (issue 6; JAX's explicit-sharding page, inventory §6.2 items
//! 12, 16, 18, 19 and §6.3 example 5), with 8 simulated CPU devices: `typeof_` of a
//! traced value inside `jit` shows the sharding its arguments give it, `auto_axes` and
//! `explicit_axes` switch axis types for part of a program, eagerly and inside `jit`, and
//! `get_abstract_mesh` shows the axis types in force. Expected texts are JAX 0.10.2's
//! (captured with `.venv-jax`, 8 forced host devices); values equal unsharded results.

use jax::prelude::*;
use jaxrepl_tests::{eight_cpu_devices, serial};
use std::sync::{Arc, Mutex};

fn ints(shape: &[usize]) -> Array {
    let n: usize = shape.iter().product();
    Array::from_vec((0..n as i32).collect::<Vec<i32>>(), shape).unwrap()
}

/// Collects lines printed from inside traced functions.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<String>>>);

impl Lines {
    fn push(&self, s: String) {
        self.0.lock().unwrap().push(s);
    }
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// Inside `jit`, `typeof_` of an argument and of values computed from it carries the
/// sharding (JAX: `int32[4@X,4]`, `ShapedArray(int32[4@X,4])`, its spec `P('X', None)`,
/// `~float32[4,4@X]` after `sin(a * 1.0).T`), and `get_abstract_mesh` is the context mesh.
#[test]
fn typeof_inside_jit_shows_shardings() {
    let _s = serial();
    eight_cpu_devices();
    let mesh = make_mesh(&[4, 2], &["X", "Y"], None).unwrap();
    let _m = set_mesh(&mesh);
    let x = device_put(&ints(&[4, 4]), P!("X", None)).unwrap();
    let lines = Lines::default();
    let l = lines.clone();
    let f = jit(move |a: Array| -> Result<Array> {
        l.push(format!("{} {:?} {:?}", typeof_(&a), typeof_(&a), typeof_(&a).sharding.map(|s| s.spec)));
        l.push(format!("{}", get_abstract_mesh()));
        let b = jnp::transpose(&(&a * 1.0).sin(), None)?;
        l.push(format!("{}", typeof_(&b)));
        Ok(b)
    });
    let y = f.call(&x).unwrap();
    assert_eq!(
        lines.take(),
        [
            "int32[4@X,4] ShapedArray(int32[4@X,4]) Some(P('X', None))",
            "AbstractMesh('X': 4, 'Y': 2, axis_types=(Explicit, Explicit), device_kind=cpu, num_cores=None, platform=cpu)",
            "~float32[4,4@X]",
        ]
    );
    assert_eq!(typeof_(&y).to_string(), "~float32[4,4@X]");
    assert_eq!(format!("{:?}", typeof_(&y)), "ShapedArray(float32[4,4@X], weak_type=True)");
    // Loop bodies and branches see their operands' types (JAX: `float32[8@X,4@Y]` for a
    // fori_loop carry and a cond operand).
    let xy = device_put(&jnp::arange(32.0).reshape(&[8, 4]), P!("X", "Y")).unwrap();
    let l = lines.clone();
    let looped = jit(move |a: Array| -> Result<Array> {
        let l2 = l.clone();
        let c = lax::fori_loop(0, 3, move |(_, c): (Array, Array)| {
            l2.push(format!("loop body: {}", typeof_(&c)));
            c.sin()
        }, a)?;
        let l3 = l.clone();
        lax::cond(&jnp::sum(&c, None)?.gt(0.0), move |t: Array| {
            l3.push(format!("branch: {}", typeof_(&t)));
            t * 2.0
        }, |t: Array| t, c)
    });
    let out = looped.call(&xy).unwrap();
    assert_eq!(typeof_(&out).to_string(), "float32[8@X,4@Y]");
    let got = lines.take();
    assert!(got.contains(&"loop body: float32[8@X,4@Y]".to_string()) && got.contains(&"branch: float32[8@X,4@Y]".to_string()), "{got:?}");
    // An unsharded argument stays plain.
    let g = {
        let l = lines.clone();
        jit(move |a: Array| {
            l.push(typeof_(&a).to_string());
            a * 2
        })
    };
    g.call(&ints(&[4, 4])).unwrap();
    assert_eq!(lines.take(), ["int32[4,4]"]);
}

/// `auto_axes`: `P('X', None) + P(None, 'X')` is an error in explicit mode and, under
/// `auto_axes` with `out_sharding=P('X', None)`, `int32[4@X,4]` with the sum's values;
/// inside, the mesh's axes are `Auto` and the types plain. The same inside `jit`.
#[test]
fn auto_axes_eager_and_under_jit() {
    let _s = serial();
    eight_cpu_devices();
    let mesh = make_mesh(&[4, 2], &["X", "Y"], None).unwrap();
    let _m = set_mesh(&mesh);
    assert_eq!(get_abstract_mesh().to_string(), "AbstractMesh('X': 4, 'Y': 2, axis_types=(Explicit, Explicit), device_kind=cpu, num_cores=None, platform=cpu)");
    let x = device_put(&ints(&[4, 4]), P!("X", None)).unwrap();
    let y = device_put(&ints(&[4, 4]), P!(None, "X")).unwrap();
    let err = jnp::add(&x, &y).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("produces an illegally sharded result: i32[4@X,4@X]"), "{err}");
    let lines = Lines::default();
    let l = lines.clone();
    let add = auto_axes(
        move |(a, b): (Array, Array)| {
            l.push(format!("{}", get_abstract_mesh()));
            l.push(format!("{}", typeof_(&a)));
            &a + &b
        },
        None,
        P!("X", None),
    );
    let r = add.call((&x, &y)).unwrap();
    assert_eq!(typeof_(&r).to_string(), "int32[4@X,4]");
    let want: Vec<i32> = (0..16).map(|i| 2 * i).collect();
    assert_eq!(r.to_vec::<i32>().unwrap(), want);
    let auto_text = "AbstractMesh('X': 4, 'Y': 2, axis_types=(Auto, Auto), device_kind=cpu, num_cores=None, platform=cpu)";
    assert_eq!(lines.take(), [auto_text, "int32[4,4]"]);
    // After the call the mesh is explicit again.
    assert!(get_abstract_mesh().to_string().contains("(Explicit, Explicit)"));
    // Inside jit: the same result type and values; inside, the axes are Auto and the
    // argument's type plain (JAX: `Type-specified sharding: P(None, None)` there).
    let add2 = add.clone();
    let j = jit(move |(a, b): (Array, Array)| add2.call((a, b)));
    let r = j.call((&x, &y)).unwrap();
    assert_eq!(typeof_(&r).to_string(), "int32[4@X,4]");
    assert_eq!(r.to_vec::<i32>().unwrap(), want);
    assert_eq!(lines.take(), [auto_text, "int32[4,4]"]);
    // Inside jit the argument is replicated over the switched axes (JAX's partitioner
    // keeps it split, `P('X',)`: the layout inside is the compiler's choice); the result
    // is laid out as out_sharding, with the right values.
    let seen = Lines::default();
    let s2 = seen.clone();
    let twice = auto_axes(
        move |a: Array| -> Result<Array> {
            let s3 = s2.clone();
            jax::debug::inspect_array_sharding(&a, move |s| s3.push(format!("{s:?}")))?;
            Ok(a * 2)
        },
        None,
        P!("X"),
    );
    let v = device_put(&ints(&[8]), P!("X")).unwrap();
    let r = jit(move |a: Array| twice.call(a)).call(&v).unwrap();
    assert_eq!(typeof_(&r).to_string(), "int32[8@X]");
    assert_eq!(r.to_vec::<i32>().unwrap(), (0..8).map(|i| 2 * i).collect::<Vec<i32>>());
    let inside = seen.take();
    assert!(inside.len() == 1 && inside[0].contains("spec=P()"), "{inside:?}");
    // grad through auto_axes inside jit: the gradient has the primal's type (JAX:
    // `float32[8@X]`) and the value 2·a.
    let sq = auto_axes(|a: Array| (&a * &a).sum(), None, P!());
    let gr = jit(grad(move |a: Array| sq.call(a)));
    let xf = device_put(&jnp::arange(8.0), P!("X")).unwrap();
    let g = gr.call(&xf).unwrap();
    assert_eq!(typeof_(&g).to_string(), "float32[8@X]");
    assert_eq!(g.to_vec::<f32>().unwrap(), (0..8).map(|i| 2.0 * i as f32).collect::<Vec<f32>>());
    // A spec naming an axis the mesh lacks is a clear error.
    let bad = auto_axes(|a: Array| a, Some(&["Z"]), P!());
    let e = bad.call(&x).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("axis 'Z' is not an axis of the mesh ('X', 'Y')"), "{e}");
}

/// `explicit_axes` inside a jit over an `Auto` mesh (JAX's example): `mesh inside f` is
/// Auto, inside `g` Explicit with `y` typed `ShapedArray(float32[4@X,4@Y])`, and the result
/// leaves explicit mode (`float32[4,4]`) keeping its layout `P('X', 'Y')`; eagerly too.
#[test]
fn explicit_axes_inside_an_auto_jit() {
    let _s = serial();
    eight_cpu_devices();
    let auto = make_mesh(&[2, 4], &["X", "Y"], Some(&[AxisType::Auto, AxisType::Auto])).unwrap();
    let _m = set_mesh(&auto);
    let lines = Lines::default();
    let l = lines.clone();
    let g = explicit_axes(
        move |y: Array| {
            l.push(format!("mesh inside g: {}", get_abstract_mesh()));
            l.push(format!("y.sharding inside g: {:?}", typeof_(&y)));
            let z = &y * 2.0;
            l.push(format!("z.sharding inside g: {:?}", typeof_(&z)));
            z
        },
        None,
        [P!("X", "Y")],
    );
    let l = lines.clone();
    let g2 = g.clone();
    let f = jit(move |a: Array| -> Result<Array> {
        l.push(format!("mesh inside f: {}", get_abstract_mesh()));
        let x = a.astype(DType::F32).sin();
        let z = g2.call(x)?;
        l.push(format!("z outside g: {:?}", typeof_(&z)));
        Ok(z * 2.0)
    });
    let some_x = device_put(&ints(&[4, 4]), P!("X", "Y")).unwrap();
    let out = f.call(&some_x).unwrap();
    let am = |t: &str| format!("AbstractMesh('X': 2, 'Y': 4, axis_types=({t}, {t}), device_kind=cpu, num_cores=None, platform=cpu)");
    assert_eq!(
        lines.take(),
        [
            format!("mesh inside f: {}", am("Auto")),
            format!("mesh inside g: {}", am("Explicit")),
            "y.sharding inside g: ShapedArray(float32[4@X,4@Y])".to_string(),
            "z.sharding inside g: ShapedArray(float32[4@X,4@Y])".to_string(),
            "z outside g: ShapedArray(float32[4,4])".to_string(),
        ]
    );
    assert_eq!(typeof_(&out).to_string(), "float32[4,4]");
    let want: Vec<f32> = (0..16).map(|i| 4.0 * (i as f32).sin()).collect();
    let got = out.to_vec::<f32>().unwrap();
    assert!(got.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-5), "{got:?}");
    // Eagerly: inside, the concrete array is on the explicit mesh; after, back on the
    // Auto mesh with its layout.
    let z = g.call(&(&some_x * 1.0)).unwrap();
    assert_eq!(lines.take()[1], "y.sharding inside g: ShapedArray(float32[4@X,4@Y], weak_type=True)");
    assert_eq!(typeof_(&z).to_string(), "~float32[4,4]");
    assert_eq!(format!("{:?}", z.sharding().unwrap()), "NamedSharding(mesh=Mesh('X': 2, 'Y': 4, axis_types=(Auto, Auto)), spec=P('X', 'Y'), memory_kind=device)");
    let zv: Vec<f32> = (0..16).map(|i| 2.0 * i as f32).collect();
    assert_eq!(z.to_vec::<f32>().unwrap(), zv);
}

/// Contexts nest as JAX's: `auto_axes` inside `explicit_axes` switches the axes of the
/// enclosing (explicit) mesh, a `shard_map` body's abstract mesh is all `Manual` and
/// switching from it is JAX's `NotImplementedError`; with no mesh `auto_axes` just calls
/// `f` and `explicit_axes` is JAX's error; `get_abstract_mesh` inside `jit` with no mesh
/// set is empty; `scan` over xs split on their leading axis is JAX's `ValueError`; an
/// array committed to other devices is not silently moved. Texts are JAX 0.10.2's.
#[test]
fn axis_contexts_nest_shard_map_is_manual_and_misuse_is_an_error() {
    let _s = serial();
    eight_cpu_devices();
    let am = |t: &str| format!("AbstractMesh('X': 4, 'Y': 2, axis_types=({t}), device_kind=cpu, num_cores=None, platform=cpu)");
    let lines = Lines::default();
    {
        let auto = make_mesh(&[4, 2], &["X", "Y"], Some(&[AxisType::Auto, AxisType::Auto])).unwrap();
        let _m = set_mesh(&auto);
        let (l1, l2) = (lines.clone(), lines.clone());
        let inner = auto_axes(
            move |x: Array| {
                l2.push(format!("inner {} {}", get_abstract_mesh(), typeof_(&x)));
                x
            },
            Some(&["X"]),
            [P!("X")],
        );
        let outer = explicit_axes(
            move |x: Array| -> Result<Array> {
                l1.push(format!("outer {} {}", get_abstract_mesh(), typeof_(&x)));
                inner.call(x)
            },
            None,
            [P!("X", "Y")],
        );
        let out = outer.call(jnp::ones(&[8, 4], DType::F32)).unwrap();
        assert_eq!(
            lines.take(),
            [format!("outer {} float32[8@X,4@Y]", am("Explicit, Explicit")), format!("inner {} float32[8,4@Y]", am("Auto, Explicit"))]
        );
        assert_eq!(typeof_(&out).to_string(), "float32[8,4]");
        assert_eq!(out.to_vec::<f32>().unwrap(), vec![1.0; 32]);
    }
    let mesh = make_mesh(&[4, 2], &["X", "Y"], None).unwrap();
    let xs = device_put(&jnp::arange(8.0), NamedSharding::new(&mesh, P!("X")).unwrap()).unwrap();
    // No mesh set.
    let doubled = auto_axes(|x: Array| x * 2.0, None, [P!()]).call(jnp::arange(4.0)).unwrap();
    assert_eq!(doubled.to_vec::<f32>().unwrap(), [0.0, 2.0, 4.0, 6.0]);
    let e = explicit_axes(|x: Array| x * 2.0, None, [P!()]).call(jnp::arange(4.0)).unwrap_err();
    assert_eq!(e.to_string(), "ValueError: Context mesh cannot be empty. Please use `jax.set_mesh` API to enter into a mesh context when using `explicit_axes` API.");
    let l = lines.clone();
    jit(move |x: Array| {
        l.push(get_abstract_mesh().to_string());
        x
    })
    .call(&xs)
    .unwrap();
    assert_eq!(lines.take(), ["AbstractMesh((), axis_types=())"]);
    let _m = set_mesh(&mesh);
    // shard_map bodies: Manual axes.
    let l = lines.clone();
    let sm = shard_map(
        move |x: Array| {
            l.push(get_abstract_mesh().to_string());
            x
        },
        None,
        [P!("X")],
        [P!("X")],
    );
    assert_eq!(sm.call(&xs).unwrap().to_vec::<f32>().unwrap(), jnp::arange(8.0).to_vec::<f32>().unwrap());
    assert_eq!(lines.take(), [am("Manual, Manual")]);
    let manual_err = "NotImplementedError: Going from `Manual` AxisType to `Auto` or `Explicit` AxisType is not allowed. Please file a bug at https://github.com/jax-ml/jax/issues with your use case";
    let sa = shard_map(|x: Array| auto_axes(|y: Array| y * 2.0, None, [P!()]).call(x), None, [P!("X")], [P!("X")]);
    assert_eq!(sa.call(&xs).unwrap_err().to_string(), manual_err);
    let sa2 = sa.clone();
    assert_eq!(jit(move |x: Array| sa2.call(x)).call(&xs).unwrap_err().to_string(), manual_err);
    let se = shard_map(|x: Array| explicit_axes(|y: Array| y * 2.0, None, [P!()]).call(x), None, [P!("X")], [P!("X")]);
    assert_eq!(se.call(&xs).unwrap_err().to_string(), manual_err);
    // scan over xs split on the leading axis.
    let x2 = device_put(&jnp::ones(&[8, 4], DType::F32), P!("X", "Y")).unwrap();
    let body = |(c, x): (Array, Array)| -> Result<(Array, Array)> { Ok((&c + &jnp::sum(&x, None)?, x * 2.0)) };
    let e = lax::scan(body, Array::scalar(0.0f32), x2.clone(), None, false, 1).unwrap_err();
    assert_eq!(e.to_string(), "ValueError: 0th dimension of all xs should be replicated. Got P('X', 'Y')");
    let e = jit(move |a: Array| lax::scan(body, Array::scalar(0.0f32), a, None, false, 1)).call(&x2).unwrap_err();
    assert!(e.message.starts_with("0th dimension of all xs should be replicated. Got P('X', 'Y')"), "{e}");
    let x3 = device_put(&jnp::ones(&[8, 4], DType::F32), P!(None, "X")).unwrap();
    let (c, ys) = lax::scan(body, Array::scalar(0.0f32), x3, None, false, 1).unwrap();
    assert_eq!(c.item::<f32>().unwrap(), 32.0);
    assert_eq!(ys.to_vec::<f32>().unwrap(), vec![2.0; 32]);
    // Under vmap a row of float32[8@X,4@Y] is float32[4@Y] (JAX): the explicit-mode
    // assert of with_sharding_constraint holds for P('Y').
    let xy = device_put(&jnp::arange(32.0).reshape(&[8, 4]), P!("X", "Y")).unwrap();
    let l = lines.clone();
    let rows = vmap(move |r: Array| -> Result<Array> {
        l.push(typeof_(&r).to_string());
        with_sharding_constraint(&r, P!("Y"))
    })(xy.clone())
    .unwrap();
    assert_eq!(lines.take(), ["float32[4@Y]"]);
    assert_eq!(rows.to_vec::<f32>().unwrap(), xy.to_vec::<f32>().unwrap());
    // Committed to other devices.
    let one = device_put(&jnp::arange(8.0), devices()[0]).unwrap();
    let devs = "with device ids [0] on platform CPU and jit's context mesh with device ids [0, 1, 2, 3, 4, 5, 6, 7] on platform CPU";
    let e = auto_axes(|y: Array| y * 2.0, None, [P!("X")]).call(&one).unwrap_err();
    assert_eq!(e.to_string(), format!("ValueError: Received incompatible devices for jitted computation. Got argument args[0] of reshard with shape float32[8] and {devs}"));
    let e = explicit_axes(|y: Array| y * 2.0, None, [P!("X")]).call(&one).unwrap_err();
    assert!(e.to_string().ends_with(devs), "{e}");
}

/// Under `vmap` over an array split over `Explicit` axes on its batch dim, `reshard`,
/// `auto_axes`, `explicit_axes` and `with_sharding_constraint` keep that split on the
/// batch dim of their result (JAX's `get_sharding_for_vmap` with the vmap's explicit mesh
/// axis), eagerly and under `jit`; a batch dim that is not split stays so. Expected
/// types are JAX 0.10.2's (found by a fresh user: the batch dim came out unsharded).
#[test]
fn vmap_keeps_the_batch_dims_explicit_sharding_through_constraints() {
    let _s = serial();
    eight_cpu_devices();
    let mesh = make_mesh(&[4, 2], &["X", "Y"], None).unwrap();
    let _m = set_mesh(&mesh);
    let host = jnp::arange(32.0).reshape(&[8, 4]);
    let x = device_put(&host, P!("X", "Y")).unwrap();
    type Body = fn(Array) -> Result<Array>;
    let cases: [(&str, Body, &str); 6] = [
        ("reshard P('Y')", |r| reshard(&r, P!("Y")), "float32[8@X,4@Y]"),
        ("reshard P(None)", |r| reshard(&r, P!(None)), "float32[8@X,4]"),
        ("reshard P()", |r| reshard(&r, P!()), "float32[8@X,4]"),
        ("auto_axes", |r| auto_axes(|y: Array| y * 2.0, None, [P!("Y")]).call(r), "float32[8@X,4@Y]"),
        ("explicit_axes", |r| explicit_axes(|y: Array| y * 2.0, None, [P!("Y")]).call(r), "float32[8@X,4@Y]"),
        ("with_sharding_constraint", |r| with_sharding_constraint(&r, P!("Y")), "float32[8@X,4@Y]"),
    ];
    let host_values = host.to_vec::<f32>().unwrap();
    for (name, body, want) in cases {
        let eager = vmap(body)(x.clone()).unwrap();
        assert_eq!(typeof_(&eager).to_string(), want, "{name}, eager");
        let jitted = jit(move |a: Array| vmap(body)(a)).call(&x).unwrap();
        assert_eq!(typeof_(&jitted).to_string(), want, "{name}, jit");
        let scale = if name.ends_with("axes") { 2.0 } else { 1.0 };
        for got in [&eager, &jitted] {
            let got = got.to_vec::<f32>().unwrap();
            assert_eq!(got, host_values.iter().map(|v| v * scale).collect::<Vec<_>>(), "{name}");
        }
    }
    // Rows not split: nothing is inserted for the batch dim; split over Y: Y is kept.
    let rows = device_put(&host, P!(None, "Y")).unwrap();
    let out = vmap(|r: Array| reshard(&r, P!("X")))(rows).unwrap();
    assert_eq!(typeof_(&out).to_string(), "float32[8,4@X]");
    let cols = device_put(&host, P!("Y", "X")).unwrap();
    let out = vmap(|r: Array| reshard(&r, P!(None)))(cols).unwrap();
    assert_eq!(typeof_(&out).to_string(), "float32[8@Y,4]");
    assert_eq!(out.to_vec::<f32>().unwrap(), host_values);
}

/// Inside `scan` a slice of `xs` has the type of `xs` without its leading dim (JAX 0.10.2:
/// `float32[4@Y]` for a row of `float32[8,4@Y]`), eager and under `jit`; fori_loop's
/// index is weak (`~int32[]`), as JAX's from Python int bounds; the scan still computes
/// the running sum of rows.
#[test]
fn scan_slices_keep_the_xs_sharding_and_the_fori_index_is_weak() {
    let _s = serial();
    eight_cpu_devices();
    let mesh = make_mesh(&[2, 4], &["X", "Y"], None).unwrap();
    let _m = set_mesh(&mesh);
    let host = jnp::arange(32.0).reshape(&[8, 4]);
    let x = device_put(&host, P!(None, "Y")).unwrap();
    let c0 = device_put(&jnp::zeros(&[4], DType::F32), P!("Y")).unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let run = |x: Array, c0: Array, seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>| -> Result<Array> {
        let (c, _) = lax::scan(
            move |(c, xi): (Array, Array)| -> Result<(Array, Array)> {
                seen.lock().unwrap().push(format!("{} {}", typeof_(&xi), typeof_(&c)));
                Ok((&c + &xi, xi.sum()))
            },
            c0,
            x,
            None,
            false,
            1,
        )?;
        Ok(c)
    };
    let eager = run(x.clone(), c0.clone(), seen.clone()).unwrap();
    let s2 = seen.clone();
    let jitted = jit(move |(x, c0): (Array, Array)| run(x, c0, s2.clone())).call((&x, &c0)).unwrap();
    assert_eq!(*seen.lock().unwrap(), vec!["float32[4@Y] float32[4@Y]".to_string(); 2]);
    let h = host.to_vec::<f32>().unwrap();
    let want: Vec<f32> = (0..4).map(|j| (0..8).map(|i| h[i * 4 + j]).sum()).collect();
    assert_eq!(eager.to_vec::<f32>().unwrap(), want);
    assert_eq!(jitted.to_vec::<f32>().unwrap(), want);
    let idx = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let i2 = idx.clone();
    let r = lax::fori_loop(0, 5, move |(i, c): (Array, Array)| {
        *i2.lock().unwrap() = typeof_(&i).to_string();
        c + i.astype(DType::F32)
    }, jnp::zeros(&[], DType::F32))
    .unwrap();
    assert_eq!(*idx.lock().unwrap(), "~int32[]");
    assert_eq!(r.to_vec::<f32>().unwrap(), vec![10.0]);
}

/// `explicit_axes` nested in `auto_axes` on an `Explicit` mesh (found by a fresh user):
/// its argument has the `in_sharding` layout on the axes it makes explicit again
/// (`float32[8,4@Y]`, JAX 0.10.2), both under `jit` and eagerly; its result is plain
/// back in the `Auto` scope, and `auto_axes`' `out_sharding` lays it out as asked.
#[test]
fn explicit_axes_nested_in_auto_axes_types_its_argument() {
    let _s = serial();
    eight_cpu_devices();
    let mesh = make_mesh(&[2, 4], &["X", "Y"], None).unwrap();
    let _m = set_mesh(&mesh);
    let host = jnp::arange(32.0).reshape(&[8, 4]);
    let x = device_put(&host, P!("X", "Y")).unwrap();
    let lines = Lines::default();
    let l = lines.clone();
    let outer = auto_axes(
        move |a: Array| -> Result<Array> {
            l.push(format!("outer arg {}", typeof_(&a)));
            let l2 = l.clone();
            let inner = explicit_axes(
                move |b: Array| {
                    l2.push(format!("inner {}", typeof_(&b)));
                    let c = &b * 2.0;
                    l2.push(format!("inner b {}", typeof_(&c)));
                    c
                },
                Some(&["Y"]),
                [P!(None, "Y")],
            );
            let r = inner.call(a)?;
            l.push(format!("outer r {}", typeof_(&r)));
            Ok(r + 1.0)
        },
        None,
        [P!("X", "Y")],
    );
    let o2 = outer.clone();
    let l = lines.clone();
    let f = jit(move |a: Array| -> Result<Array> {
        let r = o2.call(a)?;
        l.push(format!("f r {}", typeof_(&r)));
        Ok(r)
    });
    let y = f.call(&x).unwrap();
    let inside = ["outer arg float32[8,4]", "inner float32[8,4@Y]", "inner b float32[8,4@Y]", "outer r float32[8,4]"];
    let mut want: Vec<String> = inside.iter().map(|s| s.to_string()).collect();
    want.push("f r float32[8@X,4@Y]".into());
    assert_eq!(lines.take(), want);
    assert_eq!(typeof_(&y).to_string(), "float32[8@X,4@Y]");
    let values: Vec<f32> = (0..32).map(|i| 2.0 * i as f32 + 1.0).collect();
    assert_eq!(y.to_vec::<f32>().unwrap(), values);
    let e = outer.call(&x).unwrap();
    assert_eq!(lines.take(), inside);
    assert_eq!(typeof_(&e).to_string(), "float32[8@X,4@Y]");
    assert_eq!(e.to_vec::<f32>().unwrap(), values);
    // The other way round on an `Auto` mesh: `auto_axes` inside `explicit_axes`, whose
    // result leaves `jit` plain (JAX 0.10.2: `float32[8,4]`, found by a fresh user), eager
    // too.
    let auto = make_mesh(&[2, 4], &["X", "Y"], Some(&[AxisType::Auto; 2])).unwrap();
    let _a = set_mesh(&auto);
    let em = explicit_axes(|a: Array| auto_axes(|t: Array| t * 2.0, None, [P!(None, "Y")]).call(a), None, [P!("X", "Y")]);
    let em2 = em.clone();
    let y = jit(move |a: Array| em2.call(a)).call(&host).unwrap();
    assert_eq!(typeof_(&y).to_string(), "float32[8,4]");
    let doubled: Vec<f32> = (0..32).map(|i| 2.0 * i as f32).collect();
    assert_eq!(y.to_vec::<f32>().unwrap(), doubled);
    let e = em.call(&host).unwrap();
    assert_eq!(typeof_(&e).to_string(), "float32[8,4]");
    assert_eq!(e.to_vec::<f32>().unwrap(), doubled);
}

/// `grad` through `auto_axes` on an `Explicit` mesh gives the cotangent the primal's
/// type (JAX 0.10.2: `float32[8@X]` with spec `P('X',)`), eagerly, under `jit` and with
/// `value_and_grad`; the inner result has its `out_sharding` (`float32[8@Y]`).
#[test]
fn grad_through_auto_axes_keeps_the_primal_sharding() {
    let _s = serial();
    eight_cpu_devices();
    let mesh = make_mesh(&[2, 4], &["X", "Y"], None).unwrap();
    let _m = set_mesh(&mesh);
    let x = device_put(&jnp::arange(8.0), P!("X")).unwrap();
    let lines = Lines::default();
    let l = lines.clone();
    let loss = move |a: Array| -> Result<Array> {
        let b = auto_axes(|t: Array| t.sin() * 2.0, None, [P!("Y")]).call(a)?;
        l.push(typeof_(&b).to_string());
        Ok(b.sum())
    };
    let want: Vec<f32> = (0..8).map(|i| 2.0 * (i as f32).cos()).collect();
    let close = |g: &Array| g.to_vec::<f32>().unwrap().iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-5);
    let g = grad(loss.clone())(x.clone()).unwrap();
    assert_eq!(typeof_(&g).to_string(), "float32[8@X]");
    assert_eq!(format!("{:?}", g.sharding().unwrap().spec().unwrap()), "P('X',)");
    assert!(close(&g), "{:?}", g.to_vec::<f32>());
    let g = jit(grad(loss.clone())).call(&x).unwrap();
    assert_eq!(typeof_(&g).to_string(), "float32[8@X]");
    assert!(close(&g), "{:?}", g.to_vec::<f32>());
    let (v, g) = value_and_grad(loss)(x.clone()).unwrap();
    assert_eq!((typeof_(&v).to_string(), typeof_(&g).to_string()), ("float32[]".to_string(), "float32[8@X]".to_string()));
    assert!((v.item::<f32>().unwrap() - (0..8).map(|i| 2.0 * (i as f32).sin()).sum::<f32>()).abs() < 1e-4);
    assert_eq!(lines.take(), vec!["float32[8@Y]".to_string(); 3]);
}
