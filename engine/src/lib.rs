//! `jax`: JAX's ideas rebuilt in Rust. Array functions are traced into jaxprs,
//! transformed, lowered to MLIR and compiled to native code, with caches at every stage.
//! See ARCHITECTURE.md for the map; `prelude` has what notebook cells use.

pub mod error;
pub mod ir;
pub mod runtime;

pub use error::{Error, ErrorKind, Result};
