//! What a notebook cell gets from `use jax::prelude::*;`.

pub use crate::config;
pub use crate::debug;
pub use crate::error::{Error, ErrorKind, Result};
pub use crate::interactive::{EvcxrDisplay, Text, TextRepr};
pub use crate::ir::{ClosedJaxpr, DType, ShapeDtypeStruct, ShapedArray};
pub use crate::lax;
pub use crate::magic::{block_until_ready, effects_barrier, BlockUntilReady};
pub use crate::numpy as jnp;
pub use crate::trace::pytree::Static;
pub use crate::trace::Array;
pub use crate::transform::{jit, make_jaxpr, Compiled, Jitted, Lowered, Traced};
pub use ndarray;
