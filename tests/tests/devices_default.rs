//! Placement with the default single device (`jax_num_cpu_devices` unset): the device
//! API works and behaves as JAX does with one CPU device.

use jax::prelude::*;

#[test]
fn one_device_by_default() {
    let x = jnp::arange(4.0);
    assert_eq!(format!("{:?}", devices()), "[CpuDevice(id=0)]");
    assert_eq!(device_count(), 1);
    assert!(!x.committed());
    assert_eq!(format!("{:?}", x.sharding().unwrap()), "SingleDeviceSharding(device=CpuDevice(id=0), memory_kind=device)");
    assert_eq!(typeof_(&x).to_string(), "float32[4]");
    let c = device_put(&x, devices()[0]).unwrap();
    assert!(c.committed());
    assert_eq!((&c + &x).to_vec::<f32>().unwrap(), vec![0.0, 2.0, 4.0, 6.0]);
    assert!(Device::new(1).is_err());
    assert_eq!(make_mesh(&[2], &["x"], None).unwrap_err().kind, ErrorKind::Value);
    let mesh = make_mesh(&[1], &["x"], None).unwrap();
    assert_eq!(mesh.to_string(), "Mesh('x': 1, axis_types=(Explicit,))");
    let xs = device_put(&x, NamedSharding::new(&mesh, P!("x")).unwrap()).unwrap();
    assert_eq!(typeof_(&xs).to_string(), "float32[4@x]");
    let shards = xs.addressable_shards().unwrap();
    assert_eq!(shards.len(), 1);
    assert_eq!(shards[0].index, vec![Some((0, 4))]);
    assert_eq!(shards[0].data.to_vec::<f32>().unwrap(), vec![0.0, 1.0, 2.0, 3.0]);
    let f = jit(|a: Array| &a * 3.0);
    let y = f.call(&xs).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![0.0, 3.0, 6.0, 9.0]);
    assert!(y.committed());
    effects_barrier().unwrap();
    drop((x, c, xs, shards, y));
    placement_values_display_in_cells_with_jax_reprs();
    memory_accounting();
}

/// One test function: the per-device array bytes must not see other tests' arrays.
fn memory_accounting() {
    use jax::runtime::dispatch::device_bytes;
    let before = device_bytes::stats(0).0;
    let x = Array::from_vec((0..1000).map(|i| i as f32).collect(), &[1000]).unwrap();
    assert_eq!(device_bytes::stats(0).0, before + 4000);
    let y = jit(|a: Array| &a * 2.0).call(&x).unwrap();
    y.block_until_ready().unwrap();
    assert_eq!(device_bytes::stats(0).0, before + 8000);
    assert!(device_bytes::stats(0).1 >= before + 8000);
    // Donation: the donated input stops counting.
    let z = jit(|a: Array| &a + 1.0).donate_argnums(&[0]).call(&y).unwrap();
    z.block_until_ready().unwrap();
    assert!(y.is_deleted());
    assert_eq!(device_bytes::stats(0).0, before + 8000);
    drop((x, y, z));
    assert_eq!(device_bytes::stats(0).0, before);
    // One device: memory_stats is the allocator's (what %memory shows).
    let s = devices()[0].memory_stats();
    assert_eq!(s.bytes_limit, jax::runtime::memory::memory_stats().bytes_limit);
}

fn placement_values_display_in_cells_with_jax_reprs() {
    let mesh = make_mesh(&[1], &["x"], None).unwrap();
    assert_eq!(mesh.text_repr(), "Mesh(axis_sizes=(1,), axis_names=('x',), axis_types=(Explicit,))");
    assert_eq!(devices().text_repr(), "[CpuDevice(id=0)]");
    assert_eq!(P!("x", None).text_repr(), "P('x', None)");
    let xs = device_put(&jnp::arange(2.0), NamedSharding::new(&mesh, P!("x")).unwrap()).unwrap();
    assert_eq!(typeof_(&xs).text_repr(), "ShapedArray(float32[2@x])");
    assert_eq!(
        xs.addressable_shards().unwrap().text_repr(),
        "[Shard(device=CpuDevice(id=0), index=(slice(0, 2, None),), replica_id=0, data=[0. 1.])]"
    );
}
