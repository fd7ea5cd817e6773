//! `jax`: JAX's ideas rebuilt in Rust. Array functions are traced into jaxprs,
//! transformed, lowered to MLIR and compiled to native code, with caches at every stage.
//! See ARCHITECTURE.md for the map; `prelude` has what notebook cells use.

pub mod compile;
pub mod config;
pub mod debug;
pub mod display;
pub mod error;
pub mod interactive;
pub mod ir;
pub mod lax;
pub mod lower;
pub mod magic;
pub mod nn;
pub mod numpy;
pub mod prelude;
pub mod profiler;
pub mod progress;
pub mod random;
pub mod runtime;
pub mod sharding;
pub(crate) mod sharding_rules;
pub(crate) mod sharding_types;
pub mod sharding_axes;
pub(crate) mod partition;
pub mod trace;
pub mod transform;
pub mod tree;

/// `jax.tree_util`: the same functions as `tree`.
pub use tree as tree_util;
/// The `half` crate (bfloat16/float16 host types), re-exported so that cells and users
/// name the same types as the engine.
pub use half;

pub use error::{Error, ErrorKind, Result};
pub use magic::{block_until_ready, effects_barrier};
pub use transform::pipeline::compile_count;
pub use transform::eval_shape;
pub use sharding::{
    device_count, device_put, devices, get_mesh, local_devices, make_mesh, set_mesh, typeof_, AxisType, Device, Mesh, NamedSharding,
    PartitionSpec, SingleDeviceSharding,
};
