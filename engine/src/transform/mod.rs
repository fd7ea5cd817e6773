//! Transformations, as interpreters over traces: `jit` (with the AOT stages) and eager
//! execution. grad, vmap, shard_map and control flow come in later issues.

pub mod eager;
pub mod explain;
pub mod jit;
pub mod pipeline;
pub mod stages;

pub use jit::{eval_shape, jit, make_jaxpr, Jitted};
pub use stages::{parse_compiler_options, Compiled, Lowered, Stage, Traced};
pub mod ad;
pub mod ad_rules;
pub mod ad_rules_ops;
pub mod interp;
pub mod linearize;
pub use linearize::{linearize, Linearized};

pub use custom::{checkpoint, checkpoint_with_policy, custom_jvp, custom_vjp};
pub use ad::{grad, grad_argnums, hessian, jacfwd, jacrev, jvp, stop_gradient, value_and_grad, value_and_grad_argnums, value_and_grad_with_aux, vjp};
pub mod batching;
pub mod callbacks;
pub use callbacks::{io_callback, pure_callback};
pub mod batching_ops;
pub use batching::{vmap, vmap_axes};
pub mod control_ad;
pub mod custom;
pub mod shard_map;
pub use shard_map::{shard_map, shard_map_with, ShardMapped, Specs};

/// The item name of a function type `F` as JAX prints a Python function's `__name__`: the
/// last path segment of a `fn` item, without generic arguments (`my_fn`); `None` for a
/// closure (callers choose JAX's spelling: `f` in `jit(f)`, `<closure>` for callbacks).
pub(crate) fn item_name<F>() -> Option<String> {
    let full = std::any::type_name::<F>();
    if full.contains("{{closure}}") {
        return None;
    }
    let base = full.split('<').next().unwrap_or(full);
    Some(base.rsplit("::").next().unwrap_or(base).to_string())
}
