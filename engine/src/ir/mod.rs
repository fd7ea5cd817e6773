//! The engine's IR: dtypes, abstract values, jaxprs and their printer.
//! Invariant: nothing here depends on tracing, lowering or the runtime's execution.

pub mod array_ops;
pub mod aval;
pub mod dtype;
pub mod jaxpr;
pub mod parallel;
pub mod pretty;
pub mod pretty_ops;
pub mod precision;

pub use array_ops::{ConvDims, CumOp, GatherDims, GatherMode, ScatterDims, ScatterOp, WindowOp};
pub use aval::{ShapeDtypeStruct, ShapedArray};
pub use dtype::{DType, Scalar};
pub use jaxpr::{Atom, CallbackId, VmapMethod, RematPolicy, RuleId, ClosedJaxpr, Eqn, Jaxpr, Literal, Primitive, SourceInfo, Var};
pub use parallel::{Collective, ShardMapParams};
pub use pretty::print_jaxpr;
pub use precision::{DotAlgorithmPreset, DotPrecision, IntoPrecision, Precision};
