//! Devices and placement with 8 simulated CPU devices (`jax_num_cpu_devices = 8`, set
//! before anything starts the backend; this file is its own test binary for that
//! reason). Checks reprs against JAX's (docs/… inventory §1.4, §5, §6), `device_put` /
//! `addressable_shards` round trips against host data, commitment rules and their
//! errors, and that two devices' workers run at once.

use jax::prelude::*;
use jax::sharding::{set_num_cpu_devices, Shard};
use jaxrepl_tests::eight_cpu_devices;

fn panic_text(f: impl FnOnce() -> Array) -> String {
    let p = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err("should fail");
    p.downcast_ref::<String>().cloned().unwrap_or_default()
}

fn arange(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32).collect()
}

#[test]
fn devices_and_config_freeze() {
    eight_cpu_devices();
    let d = devices();
    assert_eq!(d.len(), 8);
    assert_eq!(
        format!("{d:?}"),
        "[CpuDevice(id=0), CpuDevice(id=1), CpuDevice(id=2), CpuDevice(id=3), CpuDevice(id=4), CpuDevice(id=5), CpuDevice(id=6), CpuDevice(id=7)]"
    );
    assert_eq!(d[3].to_string(), "cpu:3");
    assert_eq!(local_devices(), d);
    let e = set_num_cpu_devices(4).unwrap_err();
    assert_eq!(
        e.to_string(),
        "RuntimeError: jax_num_cpu_devices config should be updated before backends are initialized i.e. before any JAX operation is executed. You should initialize this config immediately after `import jax`."
    );
    assert_eq!(config::update_int("jax_num_cpu_devices", 2).unwrap_err().kind, ErrorKind::Runtime);
    assert_eq!(device_count(), 8);
}

#[test]
fn mesh_spec_and_sharding_reprs() {
    eight_cpu_devices();
    let mesh = make_mesh(&[4, 2], &["x", "y"], None).unwrap();
    assert_eq!(format!("{mesh:?}"), "Mesh(axis_sizes=(4, 2), axis_names=('x', 'y'), axis_types=(Explicit, Explicit))");
    assert_eq!(mesh.to_string(), "Mesh('x': 4, 'y': 2, axis_types=(Explicit, Explicit))");
    let m8 = make_mesh(&[8], &["x"], None).unwrap();
    assert_eq!(format!("{m8:?}"), "Mesh(axis_sizes=(8,), axis_names=('x',), axis_types=(Explicit,))");
    let auto = Mesh::new(&devices()[..1], &[1], &["x"], vec![AxisType::Auto]).unwrap();
    assert_eq!(auto.to_string(), "Mesh('x': 1, axis_types=(Auto,))");
    assert_eq!(format!("{:?}", P!("x", None)), "P('x', None)");
    assert_eq!(format!("{:?}", P!(("x", "y"))), "P(('x', 'y'),)");
    assert_eq!(format!("{:?}", P!()), "P()");
    assert_eq!(format!("{:?}", P!("x")), "P('x',)");
    assert_eq!(P!("x", None), PartitionSpec::new(&[Some("x"), None]));
    let mx = make_mesh(&[4, 2], &["X", "Y"], None).unwrap();
    let ns = NamedSharding::new(&mx, P!("X", "Y")).unwrap();
    assert_eq!(
        format!("{ns:?}"),
        "NamedSharding(mesh=Mesh('X': 4, 'Y': 2, axis_types=(Explicit, Explicit)), spec=P('X', 'Y'), memory_kind=device)"
    );
    let e = NamedSharding::new(&mx, P!("Z")).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
    assert!(e.message.contains("Z"), "{e}");
    let e = make_mesh(&[16], &["x"], None).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
    // Bad meshes, with Python's tuple texts in the messages.
    let e = make_mesh(&[0], &["x"], None).unwrap_err();
    assert_eq!(e.to_string(), "ValueError: Mesh axis sizes must be positive, got (0,)");
    let e = make_mesh(&[4, 2], &["x"], None).unwrap_err();
    assert_eq!(e.to_string(), "ValueError: Mesh axis_sizes (4, 2), axis_names ('x',) and axis_types (Explicit, Explicit) must have the same length");
    let e = make_mesh(&[2, 2], &["x", "x"], None).unwrap_err();
    assert_eq!(e.to_string(), "ValueError: Mesh axis names must be unique, got ('x', 'x')");
}

/// The block of an `rows x cols` row-major arange held at `index`.
fn host_block(cols: usize, rows: usize, index: &[Option<(usize, usize)>]) -> Vec<f32> {
    let (r0, r1) = index[0].unwrap_or((0, rows));
    let (c0, c1) = index[1].unwrap_or((0, cols));
    let mut v = vec![];
    for r in r0..r1 {
        for c in c0..c1 {
            v.push((r * cols + c) as f32);
        }
    }
    v
}

#[test]
fn device_put_shards_round_trip() {
    eight_cpu_devices();
    let mesh = make_mesh(&[4, 2], &["x", "y"], None).unwrap();
    let x = Array::from_vec(arange(32), &[8, 4]).unwrap();
    assert!(!x.committed());
    assert_eq!(format!("{:?}", x.sharding().unwrap()), "SingleDeviceSharding(device=CpuDevice(id=0), memory_kind=device)");

    let xs = device_put(&x, NamedSharding::new(&mesh, P!("x", "y")).unwrap()).unwrap();
    assert!(xs.committed());
    assert_eq!(typeof_(&xs).to_string(), "float32[8@x,4@y]");
    assert_eq!(format!("{:?}", typeof_(&xs)), "ShapedArray(float32[8@x,4@y])");
    let shards = xs.addressable_shards().unwrap();
    assert_eq!(shards.len(), 8);
    for (k, s) in shards.iter().enumerate() {
        assert_eq!(s.device.id as usize, k);
        assert_eq!(s.index, vec![Some((2 * (k / 2), 2 * (k / 2) + 2)), Some((2 * (k % 2), 2 * (k % 2) + 2))]);
        assert_eq!(s.data.shape(), vec![2, 2]);
        assert_eq!(s.data.to_vec::<f32>().unwrap(), host_block(4, 8, &s.index), "shard {k}");
        assert_eq!(s.data.devices().unwrap(), vec![s.device]);
        assert_eq!(s.replica_id, 0);
    }
    // The whole value gathers back.
    assert_eq!(xs.to_vec::<f32>().unwrap(), arange(32));

    // Replicated along y: devices 2k and 2k+1 hold the same rows.
    let xr = device_put(&x, NamedSharding::new(&mesh, P!("x", None)).unwrap()).unwrap();
    assert_eq!(typeof_(&xr).to_string(), "float32[8@x,4]");
    let shards: Vec<Shard> = xr.addressable_shards().unwrap();
    assert_eq!(shards.len(), 8);
    for (k, s) in shards.iter().enumerate() {
        assert_eq!(s.index, vec![Some((2 * (k / 2), 2 * (k / 2) + 2)), None]);
        assert_eq!(s.data.to_vec::<f32>().unwrap(), host_block(4, 8, &s.index));
        assert_eq!(s.replica_id, k % 2);
    }
    assert_eq!(
        format!("{:?}", shards[1]),
        "Shard(device=CpuDevice(id=1), index=(slice(0, 2, None), slice(None, None, None)), replica_id=1, data=[[0. 1. 2. 3.]\n [4. 5. 6. 7.]])"
    );
    assert_eq!(
        format!("{:?}", xr.sharding().unwrap()),
        "NamedSharding(mesh=Mesh('x': 4, 'y': 2, axis_types=(Explicit, Explicit)), spec=P('x', None), memory_kind=device)"
    );

    // Two mesh axes on one dimension.
    let xf = device_put(&x, NamedSharding::new(&mesh, P!(("x", "y"))).unwrap()).unwrap();
    assert_eq!(typeof_(&xf).to_string(), "float32[8@(x,y),4]");
    for (k, s) in xf.addressable_shards().unwrap().iter().enumerate() {
        assert_eq!(s.index, vec![Some((k, k + 1)), None]);
        assert_eq!(s.data.to_vec::<f32>().unwrap(), host_block(4, 8, &s.index));
    }

    // Auto axes do not show in the type.
    let am = mesh.with_axis_types(&[AxisType::Auto, AxisType::Explicit]).unwrap();
    let xa = device_put(&x, NamedSharding::new(&am, P!("x", "y")).unwrap()).unwrap();
    assert_eq!(typeof_(&xa).to_string(), "float32[8,4@y]");

    // The map of blocks agrees with the shards.
    let map = NamedSharding::new(&mesh, P!("x", None)).unwrap().devices_indices_map(&[8, 4]).unwrap();
    assert_eq!(map.len(), 8);
    assert_eq!(map[3], (devices()[3], vec![Some((2, 4)), None]));

    // Not divisible.
    let y = Array::from_vec(arange(6), &[6]).unwrap();
    let e = device_put(&y, NamedSharding::new(&make_mesh(&[4], &["x"], None).unwrap(), P!("x")).unwrap()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "ValueError: One of device_put args was given the sharding of NamedSharding(mesh=Mesh('x': 4, axis_types=(Explicit,)), spec=P('x',), memory_kind=device), which implies that the global size of its dimension 0 should be divisible by 4, but it is equal to 6 (full shape: (6,))"
    );
    // A spec longer than the rank: JAX 0.10.2's text.
    let e = device_put(&y, NamedSharding::new(&mesh, P!("x", None)).unwrap()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "ValueError: One of device_put args is incompatible with its sharding annotation NamedSharding(mesh=Mesh('x': 4, 'y': 2, axis_types=(Explicit, Explicit)), spec=P('x', None), memory_kind=device): Sharding NamedSharding(mesh=Mesh('x': 4, 'y': 2, axis_types=(Explicit, Explicit)), spec=P('x', None), memory_kind=device) is only valid for values of rank at least 2, but was applied to a value of rank 1."
    );
}

#[test]
fn reordered_devices_move_data() {
    eight_cpu_devices();
    let x = Array::from_vec(arange(8), &[8]).unwrap();
    let fwd = make_mesh(&[8], &["x"], None).unwrap();
    let mut rev_devs = fwd.devices();
    rev_devs.reverse();
    let rev = Mesh::new(&rev_devs, &[8], &["x"], vec![AxisType::Explicit]).unwrap();
    assert_ne!(fwd, rev);
    let held = |a: &Array| {
        let mut v = vec![0.0f32; 8];
        for s in a.addressable_shards().unwrap() {
            v[s.device.id as usize] = s.data.to_vec::<f32>().unwrap()[0];
        }
        v
    };
    let a = device_put(&x, NamedSharding::new(&fwd, P!("x")).unwrap()).unwrap();
    let b = device_put(&x, NamedSharding::new(&rev, P!("x")).unwrap()).unwrap();
    assert_eq!(held(&a), vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
    assert_eq!(held(&b), vec![7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0, 0.0]);
    assert_eq!(b.sharding().unwrap().mesh(), Some(&rev));
    // Moving a sharded array to another mesh keeps its values.
    let c = device_put(&a, NamedSharding::new(&rev, P!("x")).unwrap()).unwrap();
    assert_eq!(held(&c), held(&b));
    assert_eq!(c.to_vec::<f32>().unwrap(), arange(8));
}

#[test]
fn committed_arrays_place_results_and_mixing_devices_is_an_error() {
    eight_cpu_devices();
    let a = device_put(&Array::scalar(1.0f32), devices()[0]).unwrap();
    let b = device_put(&Array::scalar(2.0f32), devices()[1]).unwrap();
    assert!(a.committed() && b.committed());
    assert_eq!(format!("{:?}", b.sharding().unwrap()), "SingleDeviceSharding(device=CpuDevice(id=1), memory_kind=device)");
    let msg = panic_text(|| &a + &b);
    assert_eq!(
        msg,
        "ValueError: Received incompatible devices for jitted computation. Got argument x of add with shape float32[] and with device ids [0] on platform CPU and argument y of add with shape float32[] and with device ids [1] on platform CPU"
    );
    let f = jit(|(x, y): (Array, Array)| &x * &y + 1.0);
    let e = f.call((&a, &b)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "ValueError: Received incompatible devices for jitted computation. Got argument args[0] of <lambda> with shape float32[] and with device ids [0] on platform CPU and argument args[1] of <lambda> with shape float32[] and with device ids [1] on platform CPU"
    );
    // Uncommitted values follow committed ones, eagerly and under jit.
    let u = Array::scalar(3.0f32);
    let c = &b + &u;
    assert!(c.committed());
    assert_eq!(c.devices().unwrap(), vec![devices()[1]]);
    assert_eq!(c.item::<f32>().unwrap(), 5.0);
    let d = f.call((&u, &b)).unwrap();
    assert_eq!(d.devices().unwrap(), vec![devices()[1]]);
    assert!(d.committed());
    assert_eq!(d.item::<f32>().unwrap(), 7.0);
    // Uncommitted inputs give uncommitted results on device 0.
    let g = f.call((&u, &u)).unwrap();
    assert!(!g.committed());
    assert_eq!(g.devices().unwrap(), vec![devices()[0]]);
    // A sharded array mixed with an array committed to one device.
    let mesh = make_mesh(&[4], &["x"], None).unwrap();
    let s = device_put(&Array::from_vec(arange(8), &[8]).unwrap(), NamedSharding::new(&mesh, P!("x")).unwrap()).unwrap();
    let one = device_put(&Array::from_vec(arange(8), &[8]).unwrap(), devices()[5]).unwrap();
    let msg = panic_text(|| &s + &one);
    assert_eq!(
        msg,
        "ValueError: Received incompatible devices for jitted computation. Got argument x of add with shape float32[8@x] and with device ids [0, 1, 2, 3] on platform CPU and argument y of add with shape float32[8] and with device ids [5] on platform CPU"
    );
}

#[test]
fn ops_on_sharded_arrays_are_right_and_keep_shardings() {
    eight_cpu_devices();
    let mesh = make_mesh(&[4, 2], &["X", "Y"], None).unwrap();
    let host = arange(32);
    let x = device_put(&Array::from_vec(host.clone(), &[8, 4]).unwrap(), NamedSharding::new(&mesh, P!("X", "Y")).unwrap()).unwrap();
    let y = jnp::sin(&x).unwrap();
    assert_eq!(typeof_(&y).to_string(), "float32[8@X,4@Y]");
    let want: Vec<f32> = host.iter().map(|v| v.sin()).collect();
    let got = y.to_vec::<f32>().unwrap();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-6);
    }
    // Shards of a computed sharded array.
    for s in y.addressable_shards().unwrap() {
        let idx = &s.index;
        let want: Vec<f32> = host_block(4, 8, idx).iter().map(|v| v.sin()).collect();
        let got = s.data.to_vec::<f32>().unwrap();
        assert!(got.iter().zip(&want).all(|(g, w)| (g - w).abs() < 1e-6));
    }
    // Shardings propagate through shape ops (tests/tests/sharding_propagation.rs).
    let t = jnp::transpose(&x, None).unwrap();
    assert_eq!(typeof_(&t).to_string(), "float32[4@Y,8@X]");
    assert_eq!(t.sharding().unwrap().mesh(), Some(&mesh));
    // Sharded + sharded on one mesh, and under jit.
    let z = &x + &y;
    assert_eq!(typeof_(&z).to_string(), "float32[8@X,4@Y]");
    let f = jit(|(a, b): (Array, Array)| &a * 2.0 - &b);
    let w = f.call((&z, &x)).unwrap();
    assert_eq!(typeof_(&w).to_string(), "float32[8@X,4@Y]");
    let got = w.to_vec::<f32>().unwrap();
    for (i, g) in got.iter().enumerate() {
        let v = host[i];
        assert!((g - (2.0 * (v + v.sin()) - v)).abs() < 1e-4);
    }
}

#[test]
fn set_mesh_is_scoped_and_specs_use_it() {
    eight_cpu_devices();
    let x = Array::from_vec(arange(8), &[8]).unwrap();
    let e = device_put(&x, P!("x")).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
    let mesh = make_mesh(&[2], &["x"], None).unwrap();
    {
        let _g = set_mesh(&mesh);
        assert_eq!(get_mesh(), Some(mesh.clone()));
        let inner = make_mesh(&[4], &["x"], None).unwrap();
        {
            let _g2 = set_mesh(&inner);
            let xs = device_put(&x, P!("x")).unwrap();
            assert_eq!(xs.addressable_shards().unwrap().len(), 4);
        }
        let xs = device_put(&x, P!("x")).unwrap();
        assert_eq!(xs.addressable_shards().unwrap().len(), 2);
        assert_eq!(typeof_(&xs).to_string(), "float32[8@x]");
    }
    assert_eq!(get_mesh(), None);
}

/// JAX 0.10.2 keeps `set_mesh` per thread, in both its forms: under `with set_mesh(m)`
/// and after the statement `set_mesh(m)` a spawned thread's `get_abstract_mesh()` is
/// `()`, and a mesh the thread sets is not seen by the main thread.
#[test]
fn set_mesh_is_per_thread() {
    eight_cpu_devices();
    let xy = make_mesh(&[4, 2], &["X", "Y"], None).unwrap();
    let z = make_mesh(&[8], &["Z"], None).unwrap();
    let names = || get_abstract_mesh().axis_names();
    let in_thread = |f: fn() -> Vec<String>| std::thread::spawn(f).join().unwrap();
    {
        let _g = set_mesh(&xy);
        assert_eq!(names(), ["X", "Y"]);
        assert!(in_thread(|| get_abstract_mesh().axis_names()).is_empty());
        // Without a mesh, a spec in a spawned thread is the error for no mesh.
        let e = std::thread::spawn(|| device_put(&jnp::arange(8.0), P!("X")).map(|_| ())).join().unwrap().unwrap_err();
        assert_eq!(e.kind, ErrorKind::Value, "{e}");
    }
    assert!(names().is_empty());
    // A thread's own mesh, kept, is its alone.
    let seen = in_thread(|| {
        set_mesh(&make_mesh(&[8], &["Z"], None).unwrap()).keep();
        let x = device_put(&jnp::arange(8.0), P!("Z")).unwrap();
        assert_eq!(typeof_(&x).to_string(), "float32[8@Z]");
        get_abstract_mesh().axis_names()
    });
    assert_eq!(seen, ["Z"]);
    assert!(names().is_empty());
    // Two threads each under their own mesh at once.
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| {
            let _g = set_mesh(&xy);
            std::thread::sleep(std::time::Duration::from_millis(20));
            typeof_(&device_put(&jnp::arange(8.0), P!("X")).unwrap()).to_string()
        });
        let b = s.spawn(|| {
            let _g = set_mesh(&z);
            typeof_(&device_put(&jnp::arange(8.0), P!("Z")).unwrap()).to_string()
        });
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_eq!((a.as_str(), b.as_str()), ("float32[8@X]", "float32[8@Z]"));
    // A REPL cell `let _g = set_mesh(&m);` run again: the new guard is stored, then the
    // old one drops; the mesh stays set (the live guard's), and goes with the last guard.
    let mut g = set_mesh(&xy);
    g = set_mesh(&z);
    assert_eq!(names(), ["Z"]);
    drop(g);
    assert!(names().is_empty());
    // Leaving a guard's scope also removes meshes kept inside it (JAX: `with set_mesh(a):
    // set_mesh(b)` restores the mesh from before `a` on exit).
    {
        let _a = set_mesh(&xy);
        set_mesh(&z).keep();
        assert_eq!(names(), ["Z"]);
    }
    assert!(names().is_empty());
}

#[test]
fn devices_have_their_own_concurrent_workers() {
    eight_cpu_devices();
    use jax::runtime::dispatch::{submit_on, DeviceArray};
    use jax::runtime::Buffer;
    use std::sync::mpsc::channel;
    use std::sync::{Arc, Mutex};
    let names = Arc::new(Mutex::new(vec![String::new(); 2]));
    let (tx, rx) = channel::<()>();
    let aval = ShapedArray::scalar(DType::F32);
    let a = DeviceArray::pending(aval.clone());
    let b = DeviceArray::pending(aval.clone());
    // Device 0's job waits for a message that device 1's job, submitted later, sends:
    // this finishes only if the two run at once on different threads.
    let (n0, n1) = (names.clone(), names.clone());
    let av = aval.clone();
    let rx = Mutex::new(rx);
    submit_on(0, vec![a.clone()], move || {
        n0.lock().unwrap()[0] = std::thread::current().name().unwrap_or("").to_string();
        rx.lock().unwrap().recv_timeout(std::time::Duration::from_secs(120)).map_err(|_| Error::runtime("device 1 never ran"))?;
        Ok(vec![Buffer::zeros(&av)])
    });
    submit_on(1, vec![b.clone()], move || {
        n1.lock().unwrap()[1] = std::thread::current().name().unwrap_or("").to_string();
        tx.send(()).unwrap();
        Ok(vec![Buffer::zeros(&aval)])
    });
    a.wait().unwrap();
    b.wait().unwrap();
    assert_eq!(*names.lock().unwrap(), vec!["jax-cpu0".to_string(), "jax-cpu1".to_string()]);
    // An op on arrays committed to device 6 runs on device 6's worker when dispatched.
    let x = device_put(&Array::from_vec(arange(4), &[4]).unwrap(), devices()[6]).unwrap();
    let y = jnp::sin(&x).unwrap();
    assert_eq!(y.devices().unwrap(), vec![devices()[6]]);
    assert!(y.committed());
    // Each device accounts for its own arrays.
    let big = device_put(&Array::from_vec(arange(4096), &[4096]).unwrap(), devices()[6]).unwrap();
    big.block_until_ready().unwrap();
    assert!(devices()[6].memory_stats().bytes_in_use >= 4096 * 4);
    drop(big);
    effects_barrier().unwrap();
}

/// Tables copied verbatim from JAX 0.11.1 with rich (inventory §6.2 item 5).
#[test]
fn visualize_array_sharding_matches_jax() {
    eight_cpu_devices();
    let mesh = make_mesh(&[4, 2], &["X", "Y"], None).unwrap();
    let x = Array::from_vec(arange(32), &[8, 4]).unwrap();
    let vis = |spec: PartitionSpec, a: &Array| {
        let s = device_put(a, NamedSharding::new(&mesh, spec).unwrap()).unwrap();
        debug::visualize_array_sharding(&s).unwrap()
    };
    let t = |s: &str| s.lines().map(|l| l.trim_start()).collect::<Vec<_>>().join("\n") + "\n";
    assert_eq!(
        vis(P!("X", "Y"), &x),
        t("┌───────┬───────┐
           │ CPU 0 │ CPU 1 │
           ├───────┼───────┤
           │ CPU 2 │ CPU 3 │
           ├───────┼───────┤
           │ CPU 4 │ CPU 5 │
           ├───────┼───────┤
           │ CPU 6 │ CPU 7 │
           └───────┴───────┘")
    );
    assert_eq!(
        vis(P!("Y", "X"), &x),
        t("┌───────┬───────┬───────┬───────┐
           │       │       │       │       │
           │ CPU 0 │ CPU 2 │ CPU 4 │ CPU 6 │
           │       │       │       │       │
           │       │       │       │       │
           ├───────┼───────┼───────┼───────┤
           │       │       │       │       │
           │ CPU 1 │ CPU 3 │ CPU 5 │ CPU 7 │
           │       │       │       │       │
           │       │       │       │       │
           └───────┴───────┴───────┴───────┘")
    );
    assert_eq!(
        vis(P!("X", None), &x),
        t("┌──────────┐
           │ CPU 0,1  │
           ├──────────┤
           │ CPU 2,3  │
           ├──────────┤
           │ CPU 4,5  │
           ├──────────┤
           │ CPU 6,7  │
           └──────────┘")
    );
    assert_eq!(
        vis(P!(("X", "Y")), &x),
        t("┌──────────┐
           │  CPU 0   │
           ├──────────┤
           │  CPU 1   │
           ├──────────┤
           │  CPU 2   │
           ├──────────┤
           │  CPU 3   │
           ├──────────┤
           │  CPU 4   │
           ├──────────┤
           │  CPU 5   │
           ├──────────┤
           │  CPU 6   │
           ├──────────┤
           │  CPU 7   │
           └──────────┘")
    );
    assert_eq!(
        vis(P!(), &x),
        t("┌───────────────────┐
           │                   │
           │                   │
           │                   │
           │                   │
           │CPU 0,1,2,3,4,5,6,7│
           │                   │
           │                   │
           │                   │
           │                   │
           └───────────────────┘")
    );
    let x1 = Array::from_vec(arange(8), &[8]).unwrap();
    assert_eq!(
        vis(P!("X"), &x1),
        t("┌───────┬───────┬───────┬───────┐
           │CPU 0,1│CPU 2,3│CPU 4,5│CPU 6,7│
           └───────┴───────┴───────┴───────┘")
    );
    let x44 = Array::from_vec(arange(16), &[4, 4]).unwrap();
    assert_eq!(
        vis(P!(), &x44),
        t("┌───────────────────────┐
           │                       │
           │                       │
           │                       │
           │                       │
           │  CPU 0,1,2,3,4,5,6,7  │
           │                       │
           │                       │
           │                       │
           │                       │
           └───────────────────────┘")
    );
    assert_eq!(
        debug::visualize_array_sharding(&x44).unwrap(),
        t("┌───────────────────────┐
           │                       │
           │                       │
           │                       │
           │                       │
           │         CPU 0         │
           │                       │
           │                       │
           │                       │
           │                       │
           └───────────────────────┘")
    );
    let m = make_mesh(&[4, 2], &["x", "y"], None).unwrap();
    let b = device_put(&Array::from_vec(arange(64), &[16, 4]).unwrap(), NamedSharding::new(&m, P!("y", None)).unwrap()).unwrap();
    assert_eq!(
        debug::visualize_array_sharding(&b).unwrap(),
        t("┌───────────┐
           │           │
           │CPU 0,2,4,6│
           │           │
           │           │
           ├───────────┤
           │           │
           │CPU 1,3,5,7│
           │           │
           │           │
           └───────────┘")
    );
    let a = device_put(&Array::from_vec(arange(128), &[8, 16]).unwrap(), NamedSharding::new(&m, P!("x", "y")).unwrap()).unwrap();
    assert!(debug::visualize_array_sharding(&a).unwrap().starts_with("┌───────────────────────┬───────────────────────┐\n│         CPU 0         │         CPU 1         │\n"));
    let e = debug::visualize_array_sharding(&Array::from_vec(arange(8), &[2, 2, 2]).unwrap()).unwrap_err();
    assert_eq!(e.to_string(), "ValueError: `visualize_sharding` only works for shapes with 1 and 2 dimensions.");
}

/// A table wider than 80 columns is squeezed as JAX's rich console squeezes it: column
/// widths copied from JAX 0.10.2 with rich 13 (`use_color=False`), each line at most 80
/// wide. JAX's squeezed cells come out blank (rich crops the label behind the padding);
/// here the label stays, centred, on its own line.
#[test]
fn wide_sharding_tables_fit_in_80_columns() {
    eight_cpu_devices();
    let m222 = make_mesh(&[2, 2, 2], &["a", "b", "c"], None).unwrap();
    let x = device_put(&jnp::zeros(&[2, 4000], DType::F32), NamedSharding::new(&m222, P!("a", ("b", "c"))).unwrap()).unwrap();
    let v = debug::visualize_array_sharding(&x).unwrap();
    let lines: Vec<&str> = v.lines().collect();
    // JAX: ┌───────────────────┬───────────────────┬───────────────────┬──────────────────┐
    assert_eq!(lines[0], format!("┌{}┬{}┬{}┬{}┐", "─".repeat(19), "─".repeat(19), "─".repeat(19), "─".repeat(18)));
    // JAX's rows are a line shorter: the cropped label's line goes too.
    assert_eq!(lines.len(), 11, "{v}");
    assert_eq!(lines[2], "│       CPU 0       │       CPU 1       │       CPU 2       │      CPU 3       │");
    assert_eq!(lines[7], "│       CPU 4       │       CPU 5       │       CPU 6       │      CPU 7       │");
    assert!(v.lines().all(|l| l.chars().count() <= 80), "{v}");
    // Eight columns of one device each: JAX's widths 9 ×7 and 8.
    let m8 = make_mesh(&[8], &["i"], None).unwrap();
    let z = device_put(&jnp::zeros(&[8, 4000], DType::F32), NamedSharding::new(&m8, P!(None, "i")).unwrap()).unwrap();
    let v = debug::visualize_array_sharding(&z).unwrap();
    let first = v.lines().next().unwrap();
    assert_eq!(first, format!("┌{}┬{}┐", vec!["─".repeat(9); 7].join("┬"), "─".repeat(8)));
    assert!(v.contains("│  CPU 0  │  CPU 1  │"), "{v}");
    assert!(v.lines().all(|l| l.chars().count() <= 80), "{v}");
    // Narrower tables are unchanged (JAX's [8] over 8 devices).
    let y = device_put(&jnp::zeros(&[8], DType::F32), NamedSharding::new(&m8, P!("i")).unwrap()).unwrap();
    assert_eq!(
        debug::visualize_array_sharding(&y).unwrap(),
        "┌───────┬───────┬───────┬───────┬───────┬───────┬───────┬───────┐\n\
         │ CPU 0 │ CPU 1 │ CPU 2 │ CPU 3 │ CPU 4 │ CPU 5 │ CPU 6 │ CPU 7 │\n\
         └───────┴───────┴───────┴───────┴───────┴───────┴───────┴───────┘\n"
    );
}

/// The placement page's examples (inventory §5.2 items 2-6).
#[test]
fn placement_page_examples() {
    eight_cpu_devices();
    let full = make_mesh(&[8], &["x"], None).unwrap();
    assert_eq!(format!("{full:?}"), "Mesh(axis_sizes=(8,), axis_names=('x',), axis_types=(Explicit,))");
    let x = jnp::arange(4.0);
    assert!(!x.committed());
    let devs = full.devices();
    let mesh_a = Mesh::new(&devs[..1], &[1], &["x"], vec![AxisType::Explicit]).unwrap();
    let mesh_b = Mesh::new(&devs[1..2], &[1], &["x"], vec![AxisType::Explicit]).unwrap();
    let a = device_put(&Array::scalar(1.0f32), NamedSharding::new(&mesh_a, P!()).unwrap()).unwrap();
    let b = device_put(&Array::scalar(2.0f32), NamedSharding::new(&mesh_b, P!()).unwrap()).unwrap();
    assert!(a.committed());
    assert_eq!(
        panic_text(|| &a + &b),
        "ValueError: Received incompatible devices for jitted computation. Got argument x of add with shape float32[] and with device ids [0] on platform CPU and argument y of add with shape float32[] and with device ids [1] on platform CPU"
    );
    // Uncommitted values follow.
    let c = &a + &Array::scalar(3.0f32);
    assert_eq!(
        format!("{:?}", c.sharding().unwrap()),
        "NamedSharding(mesh=Mesh('x': 1, axis_types=(Explicit,)), spec=P(), memory_kind=device)"
    );
    assert_eq!(c.item::<f32>().unwrap(), 4.0);
    // device_put to another mesh moves the data.
    let mesh_a4 = Mesh::new(&devs[..4], &[4], &["x"], vec![AxisType::Explicit]).unwrap();
    let mesh_b4 = Mesh::new(&devs[4..], &[4], &["x"], vec![AxisType::Explicit]).unwrap();
    let xa = device_put(&jnp::arange(8.0), NamedSharding::new(&mesh_a4, P!("x")).unwrap()).unwrap();
    assert_eq!(typeof_(&xa).to_string(), "float32[8@x]");
    let xb = device_put(&xa, NamedSharding::new(&mesh_b4, P!("x")).unwrap()).unwrap();
    assert_eq!(xb.sharding().unwrap().mesh(), Some(&mesh_b4));
    let ids: Vec<u32> = xb.addressable_shards().unwrap().iter().map(|s| s.device.id).collect();
    assert_eq!(ids, vec![4, 5, 6, 7]);
    assert_eq!(xb.to_vec::<f32>().unwrap(), arange(8));
}
