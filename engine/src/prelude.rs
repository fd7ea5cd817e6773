//! What a notebook cell gets from `use jax::prelude::*;`.

pub use crate::config;
pub use crate::debug;
pub use crate::debug::{check_tracer_leaks, debug_infs, debug_nans, disable_jit};
pub use crate::error::{Error, ErrorKind, Result};
pub use crate::interactive::{EvcxrDisplay, Text, TextRepr};
pub use crate::ir::{ClosedJaxpr, DType, RematPolicy, ShapeDtypeStruct, ShapedArray};
pub use crate::lax;
pub use crate::magic::{block_until_ready, effects_barrier, BlockUntilReady};
pub use crate::nn;
pub use crate::profiler::{self, named_scope, NamedScope, TraceAnnotation};
pub use crate::trace::metadata::{set_xla_metadata, xla_metadata_call, XlaMetadata};
pub use crate::runtime::memory::memory_stats;
pub use crate::random;
pub use crate::numpy as jnp;
pub use crate::numpy::indexing::{ELLIPSIS, NEW_AXIS};
pub use crate::s;
pub use crate::P;
pub use crate::sharding::{
    device_count, device_put, devices, get_mesh, local_devices, make_mesh, set_mesh, typeof_, AxisType, Device, Mesh, NamedSharding,
    PartitionSpec, Sharding, SingleDeviceSharding,
};
// JAX's `jax.memory.Space`: `device_put(&x, MemoryKind::PinnedHost)`.
pub use crate::sharding::MemoryKind;
pub use crate::sharding::{dot_out_sharding, reshard, visualize_mesh, with_sharding_constraint};
/// Mixed sharding modes (`jax.sharding.auto_axes`, `explicit_axes`, `get_abstract_mesh`).
pub use crate::sharding_axes::{auto_axes, explicit_axes, get_abstract_mesh, AbstractMesh, AxesMapped};
pub use crate::trace::pytree::Static;
pub use crate::tree::{self, Pytree, TreeDef};
pub use crate::trace::Array;
pub use crate::transform::{
    checkpoint, checkpoint_with_policy, custom_jvp, custom_vjp, eval_shape, grad, hessian, jacfwd, jacrev, jit, jvp, linearize, make_jaxpr,
    grad_argnums, stop_gradient, value_and_grad, value_and_grad_argnums, value_and_grad_with_aux, vjp, vmap,
    vmap_axes, Compiled,
    Jitted, Linearized, Lowered, Stage, Traced,
};
/// Host callbacks with results (`jax.pure_callback`, `jax.experimental.io_callback`).
pub use crate::transform::callbacks::{io_callback, pure_callback};
pub use ndarray;
/// `jax.shard_map` (issue 6): per-device code with the collectives of `lax`.
pub use crate::transform::shard_map::{shard_map, shard_map_with, ShardMapped, Specs};
/// `half::bf16`/`half::f16`: host values of bfloat16/float16 arrays
/// (`Array::from_vec(vec![bf16::from_f32(1.0)], &[1])`, `x.to_vec::<bf16>()`).
pub use half::{self, bf16, f16};
