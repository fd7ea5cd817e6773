//! The lowered text and cost of `jit(shard_map(..))` (issue 6): one global module with each
//! `shard_map` as an `sdy.manual_computation` region (in/out shardings, manual axes, the
//! body on blocks, its collectives as StableHLO ops with replica groups of partition ids),
//! as JAX 0.10 prints it; `%cost` / `Lowered::cost_analysis` report the per-device program's
//! cost and the mesh total. 8 simulated CPU devices (its own test binary). Results are
//! checked against host references; texts against golden text.

use jax::prelude::*;
use jaxrepl_tests::{eight_cpu_devices, put};

/// JAX's example (`jit(shard_map(psum(2x)))` on `f32[16]` split over 8 devices): the
/// lowered module, the same through `%lower`, and the value.
#[test]
fn lowered_text_is_one_module_with_a_manual_computation() {
    eight_cpu_devices();
    let m = make_mesh(&[8], &["i"], Some(&[AxisType::Auto; 1])).unwrap();
    let f = shard_map(|x: Array| lax::psum(&(x * 2.0), "i"), Some(&m), P!("i"), P!());
    let jf = jit(move |x: Array| f.call(x)).with_name("f");
    let host: Vec<f32> = (0..16).map(|v| v as f32).collect();
    let x = put(&jnp::array(&host), &m, P!("i"));
    let want_text = expect_test::expect![[r#"
        module @jit_f attributes {mhlo.num_partitions = 8 : i32} {
          sdy.mesh @mesh = <["i"=8]>
          func.func public @main(%arg0: tensor<16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"i"}]>}) -> (tensor<2xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}) {
            %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"i"}]>] out_shardings=[<@mesh, [{}]>] manual_axes={"i"} (%arg1: tensor<2xf32>) {
              %1 = arith.constant 2.0 : f32
              %2 = tensor.empty() : tensor<2xf32>
              %3 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%arg1 : tensor<2xf32>) outs(%2 : tensor<2xf32>) {
              ^bb0(%in0: f32, %out: f32):
                %4 = arith.mulf %in0, %1 : f32
                linalg.yield %4 : f32
              } -> tensor<2xf32>
              %5 = "stablehlo.all_reduce"(%3) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids}> ({
              ^bb0(%arg2: tensor<f32>, %arg3: tensor<f32>):
                %6 = stablehlo.add %arg2, %arg3 : tensor<f32>
                stablehlo.return %6 : tensor<f32>
              }) : (tensor<2xf32>) -> tensor<2xf32>
              sdy.return %5 : tensor<2xf32>
            } : (tensor<16xf32>) -> tensor<2xf32>
            return %0 : tensor<2xf32>
          }
        }
    "#]];
    want_text.assert_eq(&jf.lower(&x).unwrap().as_text());
    want_text.assert_eq(&jax::magic::lower(|| jf.call(&x)).unwrap().0);
    // The value: sum over the 8 blocks of 2x.
    let got = jf.call(&x).unwrap().to_vec::<f32>().unwrap();
    let want: Vec<f32> = (0..2).map(|e| (0..8).map(|k| 2.0 * host[2 * k + e]).sum()).collect();
    assert_eq!(got, want);
    // An unsharded argument: the same module, its argument replicated.
    let l = jf.lower(&jnp::array(&host)).unwrap().as_text();
    assert!(l.contains(r#"@main(%arg0: tensor<16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>})"#), "{l}");
    assert!(l.contains("sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{\"i\"}]>]"), "{l}");
    // `compile()` gives the per-device program (the display module itself never compiles):
    // its calls run partitioned, its text is the per-device program, its cost one device's
    // (JAX's example: 4 flops: 2 multiplies and the all-reduce's 2 additions).
    let c = jf.lower(&x).unwrap().compile().unwrap();
    let before = jax::sharding::partitioned_calls();
    assert_eq!(c.call(&x).unwrap().to_vec::<f32>().unwrap(), want);
    assert!(jax::sharding::partitioned_calls() > before);
    assert_eq!(c.call(&jnp::array(&host)).unwrap().to_vec::<f32>().unwrap(), want);
    assert!(c.as_text().starts_with("// jaxrepl: shard_map over Mesh('i': 8"), "{}", c.as_text());
    let cost = c.cost_analysis();
    assert_eq!((cost.flops, cost.bytes_accessed), (4.0, 16.0));
    assert!(c.llvm_ir().unwrap_err().message.contains("per-device segments"));
    assert_eq!(c.memory_analysis().argument_size_in_bytes, 64);
    // The display module alone does not compile: a clear error.
    let t = jf.trace(&x).unwrap();
    let module = jax::lower::lower_jaxpr(t.jaxpr(), "f", &Default::default()).unwrap();
    let e = jax::transform::pipeline::compile_lowered(&module, &Default::default()).err().expect("display only");
    assert!(e.message.contains("display only"), "{}", e.message);
}

/// Every collective's op and replica groups on a 4×2 mesh ('i' major): groups over 'j' are
/// pairs of neighbours, over 'i' stride-2 columns; values equal the eager run.
#[test]
fn collectives_lower_to_stablehlo_ops_with_replica_groups() {
    eight_cpu_devices();
    let m = make_mesh(&[4, 2], &["i", "j"], Some(&[AxisType::Auto; 2])).unwrap();
    let perm = [(0, 1), (1, 2), (2, 3), (3, 0)];
    let f = shard_map(
        move |x: Array| -> Result<Vec<Array>> {
            let k = lax::axis_index("j")?.astype(DType::F32);
            Ok(vec![
                lax::psum(&x, "j")?,
                lax::all_gather(&x, "i", 0, true)?,
                lax::ppermute(&x, "i", &perm)?,
                lax::psum_scatter(&x, "j", 1, true)?,
                lax::all_to_all(&x, "i", 1, 1, true)?,
                lax::pmax(&(&x + &k), ("i", "j"))?,
            ])
        },
        Some(&m),
        P!("i", "j"),
        [P!("i", "j"), P!("i", "j"), P!("i", "j"), P!("i", "j"), P!("i", "j"), P!()],
    );
    let x = jnp::arange(64.0f32).reshape(&[8, 8]);
    let eager: Vec<Vec<f32>> = f.call(x.clone()).unwrap().iter().map(|a| a.to_vec::<f32>().unwrap()).collect();
    let f2 = f.clone();
    let jf = jit(move |x: Array| f2.call(x));
    let got: Vec<Vec<f32>> = jf.call(&x).unwrap().iter().map(|a| a.to_vec::<f32>().unwrap()).collect();
    assert_eq!(got, eager);
    let l = jax::magic::lower(|| jf.call(&x)).unwrap().0;
    let ops: Vec<&str> = l.lines().map(str::trim).filter(|s| s.contains("\"stablehlo.") || s.contains("partition_id") || s.contains("manual_computation")).collect();
    expect_test::expect![[r#"
        %0:6 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"i"}, {"j"}]>] out_shardings=[<@mesh, [{"i"}, {"j"}]>, <@mesh, [{"i"}, {"j"}]>, <@mesh, [{"i"}, {"j"}]>, <@mesh, [{"i"}, {"j"}]>, <@mesh, [{"i"}, {"j"}]>, <@mesh, [{}, {}]>] manual_axes={"i", "j"} (%arg1: tensor<2x4xf32>) {
        %1 = stablehlo.partition_id : tensor<ui32>
        %9 = "stablehlo.all_reduce"(%arg1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1], [2, 3], [4, 5], [6, 7]]> : tensor<4x2xi64>, use_global_device_ids}> ({
        %11 = "stablehlo.all_gather"(%arg1) <{all_gather_dim = 0 : i64, channel_handle = #stablehlo.channel_handle<handle = 2, type = 1>, replica_groups = dense<[[0, 2, 4, 6], [1, 3, 5, 7]]> : tensor<2x4xi64>, use_global_device_ids}> : (tensor<2x4xf32>) -> tensor<8x4xf32>
        %12 = "stablehlo.collective_permute"(%arg1) <{channel_handle = #stablehlo.channel_handle<handle = 3, type = 1>, source_target_pairs = dense<[[0, 2], [2, 4], [4, 6], [6, 0], [1, 3], [3, 5], [5, 7], [7, 1]]> : tensor<8x2xi64>}> : (tensor<2x4xf32>) -> tensor<2x4xf32>
        %13 = "stablehlo.reduce_scatter"(%arg1) <{channel_handle = #stablehlo.channel_handle<handle = 4, type = 1>, replica_groups = dense<[[0, 1], [2, 3], [4, 5], [6, 7]]> : tensor<4x2xi64>, scatter_dimension = 1 : i64, use_global_device_ids}> ({
        %15 = "stablehlo.all_to_all"(%arg1) <{channel_handle = #stablehlo.channel_handle<handle = 5, type = 1>, concat_dimension = 1 : i64, replica_groups = dense<[[0, 2, 4, 6], [1, 3, 5, 7]]> : tensor<2x4xi64>, split_count = 4 : i64, split_dimension = 1 : i64}> : (tensor<2x4xf32>) -> tensor<2x4xf32>
        %19 = "stablehlo.all_reduce"(%17) <{channel_handle = #stablehlo.channel_handle<handle = 6, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids}> ({"#]]
    .assert_eq(&ops.join("\n"));
    assert!(l.contains("stablehlo.maximum"), "{l}");
}

/// `%cost` and `Lowered::cost_analysis` of a shard_map call: one device's program (its
/// blocks, the all-reduce's combine counted) and the total over the mesh.
#[test]
fn cost_of_shard_map_is_per_device_and_total() {
    eight_cpu_devices();
    let m = make_mesh(&[8], &["i"], Some(&[AxisType::Auto; 1])).unwrap();
    // Per device: x block f32[4,16] @ w f32[16,8] (2·4·8·16 = 1024 flops), tanh (32
    // transcendentals), psum of f32[4,8] (32 combines).
    let f = shard_map(|(x, w): (Array, Array)| lax::psum(&x.matmul(&w).tanh(), "i"), Some(&m), [P!("i"), P!()], P!());
    let jf = jit(move |(x, w): (Array, Array)| f.call((x, w)));
    let x = put(&jnp::ones(&[32, 16], DType::F32), &m, P!("i"));
    let w = put(&jnp::ones(&[16, 8], DType::F32), &m, P!());
    let c = jf.lower((&x, &w)).unwrap().cost_analysis();
    assert_eq!((c.flops, c.transcendentals), (1024.0 + 32.0, 32.0));
    // Bytes: the device's blocks read (4·16 + 16·8 floats) and its result written (4·8).
    assert_eq!(c.bytes_accessed, ((4 * 16 + 16 * 8 + 4 * 8) * 4) as f64);
    expect_test::expect![[r#"
        jit(<lambda>) per device (each of 8 devices runs the per-device program)
        {'flops': 1056.0, 'transcendentals': 32.0, 'bytes accessed': 896.0}
        total over 8 devices
        {'flops': 8448.0, 'transcendentals': 256.0, 'bytes accessed': 7168.0}"#]]
    .assert_eq(&jax::magic::cost(|| jf.call((&x, &w))).unwrap().0);
    // The value: every row of tanh(x @ w) is tanh(16); psum over 8 blocks.
    let got = jf.call((&x, &w)).unwrap().to_vec::<f32>().unwrap();
    assert!(got.iter().all(|v| (*v as f64 - 8.0 * 16f64.tanh()).abs() < 1e-5), "{got:?}");
}

/// `shard_map`s on different meshes in one program: each distinct mesh gets its own
/// `sdy.mesh` symbol in order of first use (`@mesh`, `@mesh_0`, `@mesh_1`, as JAX 0.10.2
/// prints `jit(f5∘f3∘f2∘f1)` on meshes (8,) 'i', (4,2) ('a','b'), (8,) 'i', (2,4)
/// ('a','b')); a mesh used again reuses its symbol. The value equals the host reference.
#[test]
fn distinct_meshes_get_distinct_sdy_symbols() {
    eight_cpu_devices();
    let auto1 = [AxisType::Auto];
    let auto2 = [AxisType::Auto, AxisType::Auto];
    let m1 = make_mesh(&[8], &["i"], Some(&auto1)).unwrap();
    let m2 = make_mesh(&[4, 2], &["a", "b"], Some(&auto2)).unwrap();
    let m4 = make_mesh(&[2, 4], &["a", "b"], Some(&auto2)).unwrap();
    let f1 = shard_map(|x: Array| x * 5.0, Some(&m1), P!("i"), P!("i"));
    let f2 = shard_map(|x: Array| x * 2.0, Some(&m2), P!("a"), P!("a"));
    let f3 = shard_map(|x: Array| x + 1.0, Some(&m1), P!("i"), P!("i"));
    let f5 = shard_map(|x: Array| x - 1.0, Some(&m4), P!("b"), P!("b"));
    let jf = jit(move |x: Array| f5.call(f3.call(f2.call(f1.call(x)?)?)?)).with_name("f");
    let host: Vec<f32> = (0..16).map(|v| v as f32).collect();
    let x = jnp::array(&host);
    let text = jf.lower(&x).unwrap().as_text();
    let shown: Vec<&str> = text.lines().filter(|l| l.contains("sdy.mesh") || l.contains("sdy.manual_computation")).map(|l| l.trim()).collect();
    expect_test::expect![[r#"
        sdy.mesh @mesh = <["i"=8]>
        sdy.mesh @mesh_0 = <["a"=4, "b"=2]>
        sdy.mesh @mesh_1 = <["a"=2, "b"=4]>
        %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"i"}]>] out_shardings=[<@mesh, [{"i"}]>] manual_axes={"i"} (%arg1: tensor<2xf32>) {
        %5 = sdy.manual_computation(%0) in_shardings=[<@mesh_0, [{"a"}]>] out_shardings=[<@mesh_0, [{"a"}]>] manual_axes={"a", "b"} (%arg2: tensor<4xf32>) {
        %10 = sdy.manual_computation(%5) in_shardings=[<@mesh, [{"i"}]>] out_shardings=[<@mesh, [{"i"}]>] manual_axes={"i"} (%arg3: tensor<2xf32>) {
        %15 = sdy.manual_computation(%10) in_shardings=[<@mesh_1, [{"b"}]>] out_shardings=[<@mesh_1, [{"b"}]>] manual_axes={"a", "b"} (%arg4: tensor<4xf32>) {"#]]
    .assert_eq(&shown.join("\n"));
    let got = jf.call(&x).unwrap().to_vec::<f32>().unwrap();
    let want: Vec<f32> = host.iter().map(|v| (v * 5.0 * 2.0 + 1.0) - 1.0).collect();
    assert_eq!(got, want);
}
