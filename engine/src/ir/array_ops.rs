//! Parameter types of the array-language primitives (issue 3): gather/scatter dimension
//! numbers, convolution layouts, and the kinds of cumulative, scatter and window
//! reductions. They print as JAX prints them (`GatherDimensionNumbers(offset_dims=(0,),
//! ...)`, `GatherScatterMode.FILL_OR_DROP`), see `pretty_ops.rs`.

use super::pretty::py_tuple;

/// The combining op of a cumulative reduction (`cumsum`, `cumprod`, `cummax`, `cummin`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CumOp {
    Sum,
    Prod,
    Max,
    Min,
}

/// How a scatter combines an update with the operand (`scatter`, `scatter-add`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScatterOp {
    Set,
    Add,
    Mul,
    Min,
    Max,
}

/// What out-of-bounds gather/scatter indices do (JAX's `GatherScatterMode`).
/// `Clip` and `PromiseInBounds` clamp start indices into range (XLA's semantics);
/// `FillOrDrop` makes a gather return `fill_value` (NaN for floats, the dtype's minimum
/// for signed ints, maximum for unsigned, `true` for bool) and a scatter skip the update.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GatherMode {
    Clip,
    FillOrDrop,
    PromiseInBounds,
}

impl GatherMode {
    /// `GatherScatterMode.CLIP` etc.
    pub fn text(self) -> &'static str {
        match self {
            GatherMode::Clip => "GatherScatterMode.CLIP",
            GatherMode::FillOrDrop => "GatherScatterMode.FILL_OR_DROP",
            GatherMode::PromiseInBounds => "GatherScatterMode.PROMISE_IN_BOUNDS",
        }
    }
}

/// XLA gather dimension numbers (the index vector is the last dimension of the indices).
/// Output dims are the batch dims of the indices with the slice dims not collapsed placed
/// at `offset_dims`. Batching dims (StableHLO's, as `vmap` makes them): operand dim
/// `operand_batching_dims[k]` is read at the output's batch coordinate of indices dim
/// `start_indices_batching_dims[k]` (its slice size is 1 and it is not an offset dim).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct GatherDims {
    /// Output dims that index into a slice (ascending).
    pub offset_dims: Vec<usize>,
    /// Operand dims whose slice size is 1 and that are dropped from the output.
    pub collapsed_slice_dims: Vec<usize>,
    /// Operand dim that each entry of an index vector starts.
    pub start_index_map: Vec<usize>,
    /// Operand dims that are batch dims (paired with `start_indices_batching_dims`).
    pub operand_batching_dims: Vec<usize>,
    /// Indices dims (not the index vector dim) paired with `operand_batching_dims`.
    pub start_indices_batching_dims: Vec<usize>,
}

impl GatherDims {
    pub fn text(&self) -> String {
        format!(
            "GatherDimensionNumbers(offset_dims={}, collapsed_slice_dims={}, start_index_map={}, operand_batching_dims={}, start_indices_batching_dims={})",
            py_tuple(&self.offset_dims),
            py_tuple(&self.collapsed_slice_dims),
            py_tuple(&self.start_index_map),
            py_tuple(&self.operand_batching_dims),
            py_tuple(&self.start_indices_batching_dims)
        )
    }
}

/// XLA scatter dimension numbers (index vector last), the mirror of `GatherDims`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ScatterDims {
    /// Update dims that index into the window (ascending).
    pub update_window_dims: Vec<usize>,
    /// Operand dims of window size 1 that the updates do not have.
    pub inserted_window_dims: Vec<usize>,
    /// Operand dim that each entry of an index vector starts.
    pub scatter_dims_to_operand_dims: Vec<usize>,
    /// Operand dims that are batch dims (paired with `scatter_indices_batching_dims`).
    pub operand_batching_dims: Vec<usize>,
    /// Indices dims (not the index vector dim) paired with `operand_batching_dims`.
    pub scatter_indices_batching_dims: Vec<usize>,
}

impl ScatterDims {
    pub fn text(&self) -> String {
        format!(
            "ScatterDimensionNumbers(update_window_dims={}, inserted_window_dims={}, scatter_dims_to_operand_dims={}, operand_batching_dims={}, scatter_indices_batching_dims={})",
            py_tuple(&self.update_window_dims),
            py_tuple(&self.inserted_window_dims),
            py_tuple(&self.scatter_dims_to_operand_dims),
            py_tuple(&self.operand_batching_dims),
            py_tuple(&self.scatter_indices_batching_dims)
        )
    }
}

/// The combining op of `reduce_window` (`reduce_window_sum`, `reduce_window_max`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WindowOp {
    Sum,
    Max,
    Min,
}

/// Convolution layouts as dimension permutations: `lhs_spec = (batch, feature, spatial...)`,
/// `rhs_spec = (out feature, in feature, spatial...)`, `out_spec = (batch, feature, spatial...)`.
/// NCHW/OIHW/NCHW is `(0, 1, 2, 3)` for all three.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ConvDims {
    pub lhs_spec: Vec<usize>,
    pub rhs_spec: Vec<usize>,
    pub out_spec: Vec<usize>,
}

impl ConvDims {
    /// NCHW / OIHW / NCHW for `n` spatial dims.
    pub fn nchw(n: usize) -> ConvDims {
        let s: Vec<usize> = (0..n + 2).collect();
        ConvDims { lhs_spec: s.clone(), rhs_spec: s.clone(), out_spec: s }
    }
    pub fn text(&self) -> String {
        format!(
            "ConvDimensionNumbers(lhs_spec={}, rhs_spec={}, out_spec={})",
            py_tuple(&self.lhs_spec),
            py_tuple(&self.rhs_spec),
            py_tuple(&self.out_spec)
        )
    }
}
