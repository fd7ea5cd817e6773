//! Memory kinds (JAX 201-14, inventory §15 and §1.4) with 8 simulated CPU devices: the
//! memories a device addresses and their reprs, shardings `with_memory_kind`, `device_put`
//! between kinds (values kept, bytes accounted per device and kind: a device's
//! `memory_stats` drops when an array moves to host memory), computing on host-kind
//! arrays, and sharded arrays in host memory. Texts follow JAX 0.10.2 on CPU (captured
//! with `.venv-jax`). Its own test binary (sets `jax_num_cpu_devices`).

use jax::prelude::*;
use jax::sharding::{Memory, MemoryKind};
use jaxrepl_tests::{eight_cpu_devices, serial};

fn dev(i: usize) -> Device {
    devices()[i]
}

fn one_device_mesh(i: usize) -> Mesh {
    Mesh::new(&[dev(i)], &[1], &["x"], vec![AxisType::Auto]).unwrap()
}

#[test]
fn memories_and_reprs() {
    eight_cpu_devices();
    let d = dev(0);
    assert_eq!(format!("{:?}", d.addressable_memories()), "[CPU_DEVICE_0, PINNED_HOST_1, UNPINNED_HOST_2]");
    assert_eq!(format!("{:?}", d.default_memory()), "CPU_DEVICE_0");
    assert_eq!(d.default_memory().to_string(), "CpuDeviceMemory(id=0, process_index=0, client=cpu)");
    let kinds: Vec<&str> = d.addressable_memories().iter().map(Memory::kind).collect();
    assert_eq!(kinds, ["device", "pinned_host", "unpinned_host"]);

    let s_dev = NamedSharding::new(&one_device_mesh(0), P!("x")).unwrap();
    assert_eq!(format!("{s_dev:?}"), "NamedSharding(mesh=Mesh('x': 1, axis_types=(Auto,)), spec=P('x',), memory_kind=device)");
    let s_host = s_dev.with_memory_kind("pinned_host").unwrap();
    assert_eq!(format!("{s_host:?}"), "NamedSharding(mesh=Mesh('x': 1, axis_types=(Auto,)), spec=P('x',), memory_kind=pinned_host)");
    assert_eq!(s_host.memory_kind, MemoryKind::PinnedHost);
    // JAX's names, also where a session shows a value with `{:?}`.
    assert_eq!(format!("{:?} {}", s_host.memory_kind, s_host.memory_kind), "pinned_host pinned_host");
    assert_eq!(format!("{:?}", MemoryKind::ALL), "[device, pinned_host, unpinned_host]");
    let single = SingleDeviceSharding::new(d).with_memory_kind("unpinned_host").unwrap();
    assert_eq!(format!("{single:?}"), "SingleDeviceSharding(device=CpuDevice(id=0), memory_kind=unpinned_host)");
    let e = s_dev.with_memory_kind("foo").unwrap_err();
    assert_eq!(
        e.to_string(),
        "ValueError: Could not find memory addressable by device cpu. Device cpu can address the following memory kinds: device, pinned_host, unpinned_host. Got memory kind: foo"
    );
}

#[test]
fn device_put_between_kinds_moves_the_accounting() {
    eight_cpu_devices();
    let _l = serial();
    // Device 3 is used by no other test in this binary.
    let s_dev = NamedSharding::new(&one_device_mesh(3), P!("x")).unwrap();
    let s_host = s_dev.with_memory_kind("pinned_host").unwrap();
    let host_mem = dev(3).memory("pinned_host").unwrap();
    let (dev0, host0) = (dev(3).memory_stats().bytes_in_use, host_mem.bytes_in_use().0);

    let x = jnp::arange(1024.0).reshape(&[256, 4]); // 4 KiB, on device 0
    let on_dev = device_put(&x, s_dev.clone()).unwrap();
    on_dev.block_until_ready().unwrap();
    assert_eq!(dev(3).memory_stats().bytes_in_use, dev0 + 4096);
    let on_host = device_put(&on_dev, s_host.clone()).unwrap();
    assert_eq!(on_host.sharding().unwrap().memory_kind(), MemoryKind::PinnedHost);
    assert_eq!(format!("{:?}", on_host.sharding().unwrap()), format!("{s_host:?}"));
    assert_eq!(on_host.to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
    assert_eq!(host_mem.bytes_in_use().0, host0 + 4096);
    // Offloading: once the device copy is dropped, the device holds nothing of it (the
    // barrier makes sure the copy job no longer holds it either).
    drop(on_dev);
    jax::effects_barrier().unwrap();
    assert_eq!(dev(3).memory_stats().bytes_in_use, dev0);
    // And back: device memory again, host memory freed when the host copy goes.
    let back = device_put(&on_host, s_dev.clone()).unwrap();
    assert_eq!(back.sharding().unwrap().memory_kind(), MemoryKind::Device);
    assert_eq!(back.to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
    assert_eq!(dev(3).memory_stats().bytes_in_use, dev0 + 4096);
    drop(on_host);
    jax::effects_barrier().unwrap();
    assert_eq!(host_mem.bytes_in_use().0, host0);
    drop(back);
    jax::effects_barrier().unwrap();
    assert_eq!(dev(3).memory_stats().bytes_in_use, dev0);
}

#[test]
fn computing_on_host_arrays_stays_in_host_memory() {
    eight_cpu_devices();
    let _l = serial();
    // On CPU every kind is the same RAM: JAX 0.10.2 computes on pinned-host arrays and,
    // its memory space being part of the type, leaves the results there
    // (`jit(lambda x: x + 1)(arr_host).sharding.memory_kind` → `pinned_host`); `out_shardings`
    // in device memory gives a device result (inventory §15.3 item 3).
    let s_dev = NamedSharding::new(&one_device_mesh(0), P!("x")).unwrap();
    let s_host = s_dev.with_memory_kind("pinned_host").unwrap();
    let arr_host = device_put(&jnp::arange(8.0).reshape(&[2, 4]), s_host).unwrap();
    let y = jit(|x: Array| x + 1.0).call(&arr_host).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    assert_eq!(y.sharding().unwrap().memory_kind(), MemoryKind::PinnedHost);
    let y = jit(|x: Array| x + 1.0).out_shardings(vec![s_dev]).call(&arr_host).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    assert_eq!(y.sharding().unwrap().memory_kind(), MemoryKind::Device);
    let z = arr_host.clone() * 2.0;
    assert_eq!(z.to_vec::<f32>().unwrap(), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0]);
    assert_eq!(z.sharding().unwrap().memory_kind(), MemoryKind::PinnedHost);
}

#[test]
fn sharded_arrays_in_host_memory() {
    eight_cpu_devices();
    let _l = serial();
    let mesh = make_mesh(&[8], &["i"], None).unwrap();
    let s = NamedSharding::new(&mesh, P!("i")).unwrap().with_memory_kind("unpinned_host").unwrap();
    let before: Vec<usize> = (0..8).map(|i| dev(i).memory("unpinned_host").unwrap().bytes_in_use().0).collect();
    let x = device_put(&jnp::arange(64.0), s).unwrap();
    x.block_until_ready().unwrap();
    assert_eq!(x.sharding().unwrap().memory_kind(), MemoryKind::UnpinnedHost);
    assert_eq!(x.to_vec::<f32>().unwrap(), (0..64).map(|i| i as f32).collect::<Vec<_>>());
    for i in 0..8 {
        // Each device holds its 8-element shard (32 bytes) in unpinned host memory.
        assert_eq!(dev(i).memory("unpinned_host").unwrap().bytes_in_use().0, before[i] + 32, "device {i}");
    }
    let shards = x.addressable_shards().unwrap();
    assert_eq!(shards[5].data.to_vec::<f32>().unwrap(), (40..48).map(|i| i as f32).collect::<Vec<_>>());
    drop(shards);
    drop(x);
    jax::effects_barrier().unwrap();
    for i in 0..8 {
        assert_eq!(dev(i).memory("unpinned_host").unwrap().bytes_in_use().0, before[i], "device {i}");
    }
}

/// `(bytes_in_use, peak)` of device `i`'s memory of kind `kind`.
fn kind_stats(i: u32, kind: MemoryKind) -> (usize, usize) {
    jax::runtime::memory_kind::stats(i, kind)
}

#[test]
fn out_shardings_with_a_memory_kind_make_outputs_in_host_memory() {
    eight_cpu_devices();
    let _l = serial();
    // Device 5 is used by no other test in this binary (but `sharded_arrays_in_host_memory`,
    // in unpinned host memory only).
    let d = dev(5);
    let host = SingleDeviceSharding::new(d).with_memory_kind("pinned_host").unwrap();
    let x = device_put(&jnp::arange(1024.0), d).unwrap(); // 4 KiB in device 5's device memory
    x.block_until_ready().unwrap();
    jax::effects_barrier().unwrap();
    let (dev0, dev_peak0) = kind_stats(5, MemoryKind::Device);
    let host0 = kind_stats(5, MemoryKind::PinnedHost).0;
    let f = jit(|x: Array| x * 2.0 + 1.0).out_shardings(vec![host.clone()]);
    let y = f.call(&x).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), (0..1024).map(|i| 2.0 * i as f32 + 1.0).collect::<Vec<_>>());
    assert_eq!(y.sharding().unwrap().memory_kind(), MemoryKind::PinnedHost);
    assert_eq!(format!("{:?}", y.sharding().unwrap()), "SingleDeviceSharding(device=CpuDevice(id=5), memory_kind=pinned_host)");
    jax::effects_barrier().unwrap();
    // Made in host memory: 4096 more bytes there, and the device never held the output
    // (its peak did not move: no result was made on the device and copied).
    assert_eq!(kind_stats(5, MemoryKind::PinnedHost).0, host0 + 4096);
    assert_eq!(kind_stats(5, MemoryKind::Device), (dev0, dev_peak0));
    assert_eq!(d.memory("pinned_host").unwrap().bytes_in_use().0, host0 + 4096);

    // The lowered module marks the result (JAX 0.10.2: `-> (tensor<1024xf32> {jax.result_info
    // = "result", mhlo.memory_kind = "pinned_host", ...})`), and memory_analysis counts it
    // as a host output.
    let lowered = f.trace(&x).unwrap().lower().unwrap();
    let text = lowered.as_text();
    assert!(text.contains("func.func public @main(%arg0: tensor<1024xf32>) -> (tensor<1024xf32> {mhlo.memory_kind = \"pinned_host\"})"), "{text}");
    let ma = lowered.compile().unwrap().memory_analysis();
    assert_eq!((ma.argument_size_in_bytes, ma.output_size_in_bytes, ma.host_output_size_in_bytes), (4096, 0, 4096));
    assert!(ma.to_string().contains("host_output_size_in_bytes=4096"), "{ma}");
    // A plain jit of the same function: unannotated, all device.
    let plain = jit(|x: Array| x * 2.0 + 1.0);
    assert!(!plain.trace(&x).unwrap().lower().unwrap().as_text().contains("memory_kind"));

    // in_shardings in a host kind: an uncommitted argument is moved there and marked; a
    // committed one in device memory is JAX 0.10.2's error.
    let g = jit(|x: Array| x + 1.0).in_shardings(vec![Some(host.clone())]);
    let e = g.call(&x).unwrap_err();
    assert!(e.message.starts_with("Memory kinds passed to jax.jit does not match memory kind on the respective arg. Got jit memory kind: pinned_host, arg memory kind: device"), "{e}");
    let x = jnp::arange(1024.0);
    let text = g.trace(&x).unwrap().lower().unwrap().as_text();
    assert!(text.contains("%arg0: tensor<1024xf32> {mhlo.memory_kind = \"pinned_host\"}"), "{text}");
    let ma = g.trace(&x).unwrap().lower().unwrap().compile().unwrap().memory_analysis();
    assert_eq!((ma.argument_size_in_bytes, ma.host_argument_size_in_bytes), (0, 4096));
    assert_eq!(g.call(&x).unwrap().to_vec::<f32>().unwrap(), (0..1024).map(|i| i as f32 + 1.0).collect::<Vec<_>>());

    drop(y);
    jax::effects_barrier().unwrap();
    assert_eq!(kind_stats(5, MemoryKind::PinnedHost).0, host0);
}

#[test]
fn device_put_to_a_memory_kind_inside_jit() {
    eight_cpu_devices();
    let _l = serial();
    let d = dev(6);
    let x = device_put(&jnp::arange(256.0), d).unwrap(); // 1 KiB on device 6
    x.block_until_ready().unwrap();
    jax::effects_barrier().unwrap();
    let (dev0, dev_peak0) = kind_stats(6, MemoryKind::Device);
    let host0 = kind_stats(6, MemoryKind::PinnedHost).0;
    // JAX: jax.jit(lambda x: jax.device_put(x * 2, jax.memory.Space.Host))
    let f = jit(|x: Array| device_put(&(x * 2.0), MemoryKind::PinnedHost));
    let y = f.call(&x).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), (0..256).map(|i| 2.0 * i as f32).collect::<Vec<_>>());
    assert_eq!(y.sharding().unwrap().memory_kind(), MemoryKind::PinnedHost);
    jax::effects_barrier().unwrap();
    assert_eq!(kind_stats(6, MemoryKind::PinnedHost).0, host0 + 1024);
    assert_eq!(kind_stats(6, MemoryKind::Device), (dev0, dev_peak0));
    // The jaxpr has JAX 0.10.2's `device_put` equation (JAX also types its result
    // `f32<host>[256]`; our avals carry no memory space).
    let jaxpr = f.trace(&x).unwrap().jaxpr().to_string();
    assert_eq!(
        jaxpr,
        "{ lambda ; a:f32[256]. let
    b:f32[256] = mul a 2.0:f32[]
    c:f32[256] = device_put[
      copy_semantics=(ArrayCopySemantics.REUSE_INPUT,)
      devices=(MemorySpace.Host,)
      srcs=(None,)
    ] b
  in (c,) }"
    );
    let text = f.trace(&x).unwrap().lower().unwrap().as_text();
    assert!(text.contains("-> (tensor<256xf32> {mhlo.memory_kind = \"pinned_host\"})"), "{text}");
    // Back to device memory inside the function: the result follows.
    let back = jit(|x: Array| {
        let h = device_put(&x, MemoryKind::UnpinnedHost)?;
        device_put(&(h + 1.0), MemoryKind::Device)
    });
    let z = back.call(&x).unwrap();
    assert_eq!(z.sharding().unwrap().memory_kind(), MemoryKind::Device);
    assert_eq!(z.to_vec::<f32>().unwrap(), (0..256).map(|i| i as f32 + 1.0).collect::<Vec<_>>());
    // Eagerly: the same move (JAX's `jax.device_put(x, jax.memory.Space.Host)`), same device.
    let e = device_put(&x, MemoryKind::PinnedHost).unwrap();
    assert_eq!(format!("{:?}", e.sharding().unwrap()), "SingleDeviceSharding(device=CpuDevice(id=6), memory_kind=pinned_host)");
    assert_eq!(e.to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
    // Under vmap the batched value moves.
    let vm = jit(vmap(|r: Array| device_put(&(r.sum() + 1.0), MemoryKind::PinnedHost)));
    let s = vm.call(&jnp::arange(6.0).reshape(&[2, 3])).unwrap();
    assert_eq!(s.sharding().unwrap().memory_kind(), MemoryKind::PinnedHost);
    assert_eq!(s.to_vec::<f32>().unwrap(), vec![4.0, 13.0]);
    drop(s);
    // Differentiable (linear): d/dx sum(device_put(x * x)) = 2x.
    let g = grad(|x: Array| -> jax::Result<Array> { Ok(device_put(&(&x * &x), MemoryKind::PinnedHost)?.sum()) })(jnp::arange(4.0)).unwrap();
    assert_eq!(g.to_vec::<f32>().unwrap(), vec![0.0, 2.0, 4.0, 6.0]);
    drop((y, e));
    jax::effects_barrier().unwrap();
    assert_eq!(kind_stats(6, MemoryKind::PinnedHost).0, host0);
}

#[test]
fn sharded_jit_outputs_in_host_memory() {
    eight_cpu_devices();
    let _l = serial();
    let mesh = make_mesh(&[8], &["i"], None).unwrap();
    let s_dev = NamedSharding::new(&mesh, P!("i")).unwrap();
    let s_host = s_dev.with_memory_kind("pinned_host").unwrap();
    let x = device_put(&jnp::arange(64.0), s_dev.clone()).unwrap();
    x.block_until_ready().unwrap();
    jax::effects_barrier().unwrap();
    let before: Vec<((usize, usize), usize)> =
        (0..8).map(|i| (kind_stats(i, MemoryKind::Device), kind_stats(i, MemoryKind::PinnedHost).0)).collect();
    // A shard-local function: each device computes its 8 elements into its pinned host memory.
    let f = jit(|x: Array| x.sin() * 2.0).out_shardings(vec![s_host.clone()]);
    let y = f.call(&x).unwrap();
    assert_eq!(format!("{:?}", y.sharding().unwrap()), format!("{s_host:?}"));
    let want: Vec<f32> = (0..64).map(|i| (i as f32).sin() * 2.0).collect();
    for (a, b) in y.to_vec::<f32>().unwrap().iter().zip(&want) {
        assert!((a - b).abs() <= 1e-5, "{a} vs {b}");
    }
    jax::effects_barrier().unwrap();
    for i in 0..8u32 {
        let ((dev0, peak0), host0) = before[i as usize];
        assert_eq!(kind_stats(i, MemoryKind::PinnedHost).0, host0 + 32, "device {i}");
        assert_eq!(kind_stats(i, MemoryKind::Device).0, dev0, "device {i}");
        // Device 0 also held the host-side reads of `y` above; the others never held a copy.
        if i > 0 {
            assert_eq!(kind_stats(i, MemoryKind::Device).1, peak0, "device {i}");
        }
    }
    drop(y);
    jax::effects_barrier().unwrap();
    for i in 0..8u32 {
        assert_eq!(kind_stats(i, MemoryKind::PinnedHost).0, before[i as usize].1, "device {i}");
    }
}

/// `in_shardings` with a host memory kind on a mesh (JAX: `jit(f, in_shardings=
/// NamedSharding(mesh, P('i'), memory_kind='pinned_host'))`): each device's block is placed
/// in its pinned host memory, the lowered text marks the argument with its kind and its
/// Shardy sharding (JAX 0.10.2: `%arg0: tensor<16xf32> {mhlo.memory_kind = "pinned_host",
/// sdy.sharding = #sdy.sharding<@mesh, [{"i"}]>}`), and the call runs partitioned, its
/// result in pinned host memory too (as JAX's), equal to the unsharded result.
#[test]
fn sharded_in_shardings_in_host_memory() {
    eight_cpu_devices();
    let _l = serial();
    let mesh = make_mesh(&[8], &["i"], None).unwrap();
    let s_host = NamedSharding::new(&mesh, P!("i")).unwrap().with_memory_kind("pinned_host").unwrap();
    let x = jnp::arange(16.0);
    let f = jit(|x: Array| x * 2.0).in_shardings(vec![Some(s_host.clone())]);
    let text = f.lower(&x).unwrap().as_text();
    assert!(
        text.contains(r#"%arg0: tensor<16xf32> {mhlo.memory_kind = "pinned_host", sdy.sharding = #sdy.sharding<@mesh, [{"i"}]>}"#),
        "{text}"
    );
    let before = jax::sharding::partitioned_calls();
    let y = f.call(&x).unwrap();
    assert!(jax::sharding::partitioned_calls() > before, "runs partitioned");
    assert_eq!(y.to_vec::<f32>().unwrap(), (0..16).map(|i| 2.0 * i as f32).collect::<Vec<_>>());
    // The result stays in pinned host memory (JAX 0.10.2 on the argument placed there:
    // `float32<host>[16@i]`, its lowered result `{mhlo.memory_kind = "pinned_host", …}`).
    assert_eq!(y.sharding().unwrap().memory_kind(), MemoryKind::PinnedHost);
    assert_eq!(typeof_(&y).to_string(), "float32<host>[16@i]");
    assert!(text.contains(r#"-> (tensor<16xf32> {mhlo.memory_kind = "pinned_host", sdy.sharding = #sdy.sharding<@mesh, [{"i"}]>})"#), "{text}");
    // The argument as placed: each device's 2 elements in its pinned host memory.
    let placed = device_put(&x, s_host.clone()).unwrap();
    assert_eq!(format!("{:?}", placed.sharding().unwrap()), format!("{s_host:?}"));
    for s in placed.addressable_shards().unwrap() {
        assert_eq!(s.data.sharding().unwrap().memory_kind(), MemoryKind::PinnedHost, "device {}", s.device.id);
    }
}
