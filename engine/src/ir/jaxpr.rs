//! The jaxpr: JAX's typed, first-order intermediate language.
//!
//! A `Jaxpr` is a list of equations `outs = prim[params] ins` over variables with
//! `ShapedArray` types; a `ClosedJaxpr` adds the constant values for its `constvars`.
//! Invariant: every `Var` is defined once (as a constvar, an invar or an equation
//! output) before it is used, and equation outputs carry the types abstract evaluation
//! gave them. See <https://docs.jax.dev/en/latest/jaxpr.html>.

use super::aval::ShapedArray;
use super::array_ops::{ConvDims, CumOp, GatherDims, GatherMode, ScatterDims, ScatterOp, WindowOp};
use super::dtype::{DType, Scalar};
use crate::runtime::Buffer;
use std::sync::Arc;
use std::fmt;

/// A variable of a jaxpr. `id` is unique within one jaxpr (and its sub-jaxprs).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Var {
    pub id: u32,
    pub aval: ShapedArray,
}

/// A scalar constant written inline in an equation: `2.0:f32[]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Literal {
    pub value: Scalar,
    pub aval: ShapedArray,
}

/// An equation operand: a variable or an inline scalar literal.
#[derive(Clone, Debug, PartialEq)]
pub enum Atom {
    Var(Var),
    Lit(Literal),
}

impl Atom {
    pub fn aval(&self) -> &ShapedArray {
        match self {
            Atom::Var(v) => &v.aval,
            Atom::Lit(l) => &l.aval,
        }
    }
}

/// Where in the user's code an equation was traced (from `#[track_caller]`).
///
/// In the REPL, a location in a cell has `file` = `cell N` (`N` is the `In [N]` number)
/// and the cell's own line and column (`trace::cells`); elsewhere it is the Rust source
/// file. Shown to the user through `Display`: `cell 3, line 2` or `src/main.rs:10:5`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SourceInfo {
    pub file: String,
    pub line: u32,
    pub column: u32,
}

impl SourceInfo {
    /// The cell number when the location is in a REPL cell.
    pub fn cell(&self) -> Option<u64> {
        self.file.strip_prefix(crate::trace::cells::CELL_PREFIX)?.parse().ok()
    }
    /// The line without the column: `cell 3, line 2` or `src/main.rs:10`.
    pub fn line_label(&self) -> String {
        match self.cell() {
            Some(n) => format!("cell {n}, line {}", self.line),
            None => format!("{}:{}", self.file, self.line),
        }
    }
}

impl fmt::Display for SourceInfo {
    /// `cell 3, line 2` in the REPL, `file:line:column` elsewhere.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.cell() {
            Some(_) => f.write_str(&self.line_label()),
            None => write!(f, "{}:{}:{}", self.file, self.line, self.column),
        }
    }
}

/// Identifier of a host callback registered with the runtime (`debug::print`, ...).
pub type CallbackId = u64;

/// How `vmap` batches a `pure_callback` (JAX's `vmap_method`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VmapMethod {
    /// one call per batch element (a loop on the host)
    Sequential,
    /// as `Sequential` (JAX unrolls its loop; ours is the same host loop)
    SequentialUnrolled,
    /// one call; unbatched operands get a leading axis of size 1
    ExpandDims,
    /// one call; unbatched operands are broadcast to the batch size
    BroadcastAll,
    /// JAX's deprecated `vectorized=True`: as `ExpandDims`
    LegacyVectorized,
}

impl VmapMethod {
    /// JAX's spelling: `sequential`, `expand_dims`, ...
    pub fn name(self) -> &'static str {
        match self {
            VmapMethod::Sequential => "sequential",
            VmapMethod::SequentialUnrolled => "sequential_unrolled",
            VmapMethod::ExpandDims => "expand_dims",
            VmapMethod::BroadcastAll => "broadcast_all",
            VmapMethod::LegacyVectorized => "legacy_vectorized",
        }
    }
    /// Every method, in JAX's order.
    pub const ALL: [VmapMethod; 5] = [
        VmapMethod::Sequential,
        VmapMethod::SequentialUnrolled,
        VmapMethod::ExpandDims,
        VmapMethod::BroadcastAll,
        VmapMethod::LegacyVectorized,
    ];
}

/// Identifier of a user differentiation rule (`custom_jvp`, `custom_vjp`).
pub type RuleId = u64;

/// What `checkpoint` may save for the backward pass instead of recomputing it
/// (`jax.checkpoint_policies`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RematPolicy {
    /// Recompute everything (the default).
    NothingSaveable,
    /// Save everything (no recomputation).
    EverythingSaveable,
    /// Save the results of matrix products (`dot_general`).
    DotsSaveable,
    /// Save the results of matrix products without batch dimensions.
    DotsWithNoBatchDimsSaveable,
}

impl RematPolicy {
    /// JAX's printed name (`None` for the default).
    pub fn name(self) -> &'static str {
        match self {
            RematPolicy::NothingSaveable => "None",
            RematPolicy::EverythingSaveable => "everything_saveable",
            RematPolicy::DotsSaveable => "dots_saveable",
            RematPolicy::DotsWithNoBatchDimsSaveable => "dots_with_no_batch_dims_saveable",
        }
    }
}

/// The primitive set. Each variant carries its params; `name()` is JAX's name.
#[derive(Clone, Debug, PartialEq)]
pub enum Primitive {
    // -- elementwise unary (same shape and dtype out) --
    /// -x
    Neg,
    /// e^x
    Exp,
    /// natural logarithm
    Log,
    /// sine
    Sin,
    /// cosine
    Cos,
    /// tangent (`lax.tan`); lowered as sin/cos
    Tan,
    /// hyperbolic tangent
    Tanh,
    /// square root
    Sqrt,
    /// |x|
    Abs,
    /// logical not (bool) / bitwise not (ints)
    Not,
    // -- elementwise binary (operands already broadcast to one shape and dtype) --
    /// x + y
    Add,
    /// x + y accumulating tangents and cotangents (JAX's `add_any`, add_jaxvals)
    AddAny,
    /// x - y
    Sub,
    /// x * y
    Mul,
    /// x / y (truncating for integers, as lax.div)
    Div,
    /// remainder with the sign of x (lax.rem)
    Rem,
    /// x ** y
    Pow,
    /// elementwise maximum
    Max,
    /// elementwise minimum
    Min,
    /// logical/bitwise and
    And,
    /// logical/bitwise or
    Or,
    /// comparisons, producing bool
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    /// select_n(which, *cases): case `which` per element (bool which: false→0, true→1)
    SelectN,
    // -- type and shape --
    /// cast to `new_dtype`
    ConvertElementType { new_dtype: DType, weak_type: bool },
    /// place operand dim i at output dim broadcast_dimensions[i], broadcasting the rest
    BroadcastInDim { shape: Vec<usize>, broadcast_dimensions: Vec<usize> },
    /// row-major reshape to `new_sizes`
    Reshape { new_sizes: Vec<usize> },
    /// permute dimensions: output dim i is operand dim permutation[i]
    Transpose { permutation: Vec<usize> },
    /// integers 0.. along `dimension` of `shape`
    Iota { dtype: DType, shape: Vec<usize>, dimension: usize },
    // -- reductions (drop `axes`) --
    ReduceSum { axes: Vec<usize> },
    ReduceMax { axes: Vec<usize> },
    ReduceMin { axes: Vec<usize> },
    // -- contraction --
    /// generalized matmul: output dims are batch, lhs free, rhs free
    DotGeneral {
        lhs_contracting: Vec<usize>,
        rhs_contracting: Vec<usize>,
        lhs_batch: Vec<usize>,
        rhs_batch: Vec<usize>,
        /// `None`: the default (`jax_default_matmul_precision` when lowered)
        precision: Option<super::precision::DotPrecision>,
        preferred_element_type: Option<DType>,
        /// JAX's `out_sharding` (`jnp.dot(.., out_sharding=P(..))`): the result's sharding
        /// on the mesh of the call's arguments, which also allows contracting dims sharded
        /// alike on both operands (the partial products are all-reduced or
        /// reduce-scattered to it). `None`: the propagated sharding.
        out_sharding: Option<crate::sharding::PartitionSpec>,
    },
    // -- transformations --
    /// identity whose cotangent and tangent are zero (`jax.lax.stop_gradient`)
    StopGradient,
    /// identity that lays its result out as `sharding` (`jax.lax.with_sharding_constraint`
    /// inside `jit`; the partitioner reshards to it)
    ShardingConstraint { sharding: crate::sharding::NamedSharding },
    /// identity whose result lives in `memory_kind` (`jax.device_put(x, jax.memory.Space.Host)`
    /// inside `jit`, JAX's `device_put` equation): decides the memory kind of a jit output
    DevicePut { memory_kind: crate::runtime::MemoryKind },
    // -- control flow: sub-jaxprs are closed over nothing; their constants are leading operands --
    /// `cond[branches] index *ops`: runs branch `clamp(index, 0, n-1)` on `ops`
    Cond { branches: Vec<Jaxpr> },
    /// `while[...] *cond_consts *body_consts *init`: repeats `body` while `cond` is true
    While { cond_jaxpr: Box<Jaxpr>, body_jaxpr: Box<Jaxpr>, cond_nconsts: usize, body_nconsts: usize },
    /// `scan[...] *consts *init *xs` → `*carry *ys`: a loop over the leading axis of `xs`
    Scan { jaxpr: Box<Jaxpr>, length: usize, reverse: bool, unroll: usize, num_consts: usize, num_carry: usize },
    // -- calls with custom differentiation: the body is inlined when compiled --
    /// `custom_jvp_call`: `call_jaxpr` whose JVP is the user's rule `rule`
    CustomJvpCall { name: String, call_jaxpr: Box<Jaxpr>, rule: RuleId, num_consts: usize },
    /// `custom_vjp_call`: `call_jaxpr` whose VJP is the user's `fwd`/`bwd` pair `rule`
    CustomVjpCall { name: String, call_jaxpr: Box<Jaxpr>, rule: RuleId, num_consts: usize },
    /// `checkpoint`: `jaxpr` whose intermediates are recomputed for the backward pass
    Checkpoint { jaxpr: Box<Jaxpr>, policy: RematPolicy },
    // -- effects and nesting --
    /// host callback with the operands (no outputs): `debug::print`
    DebugCallback { callback: CallbackId, fmt: String },
    /// host function `callback` (named `name`) giving `result_avals`, with no side
    /// effects (`jax.pure_callback`): dead code when its results are unused
    PureCallback { callback: CallbackId, name: String, result_avals: Vec<ShapedArray>, vmap_method: Option<VmapMethod> },
    /// host function with side effects (`io_callback`): never eliminated; `ordered`
    /// ones keep program order and cannot be `vmap`ped
    IoCallback { callback: CallbackId, name: String, result_avals: Vec<ShapedArray>, ordered: bool },
    /// a nested jitted call
    Pjit { name: String, jaxpr: Box<ClosedJaxpr> },
    // -- random / bits --
    /// x << y on integers of one dtype; shift amounts of the bit width or more (as
    /// unsigned) give 0, as XLA defines it
    ShiftLeft,
    /// x >> y filling with zeros; amounts of the bit width or more give 0
    ShiftRightLogical,
    /// x >> y filling with the sign bit; amounts of the bit width or more give all sign bits
    ShiftRightArithmetic,
    /// reinterprets each element's bits as `new_dtype` (of the same bit width)
    BitcastConvertType { new_dtype: DType },
    /// inverse error function (floats), XLA's single-precision polynomial
    ErfInv,
    /// the next representable float after x in the direction of y (floats)
    NextAfter,
    // -- issue 3 array ops --
    /// sign: -1, 0 or 1 (floats keep ±0 and NaN; unsigned 0 or 1)
    Sign,
    /// round toward -inf (floats)
    Floor,
    /// round toward +inf (floats)
    Ceil,
    /// round to integral: rounding_method 0 = half away from zero, 1 = half to even
    Round { rounding_method: u8 },
    /// bool: neither infinite nor NaN (floats)
    IsFinite,
    /// log(1 + x), accurate near 0
    Log1p,
    /// e^x - 1, accurate near 0
    Expm1,
    /// 1 / (1 + e^-x)
    Logistic,
    /// the error function
    Erf,
    /// x ** y for a static integer exponent y (repeated multiplication)
    IntegerPow { y: i32 },
    /// logical (bool) / bitwise (ints) exclusive or; two operands of one shape and dtype
    Xor,
    /// rounds floats to `exponent_bits`/`mantissa_bits` (same dtype out), as XLA does
    ReducePrecision { exponent_bits: u32, mantissa_bits: u32 },
    /// product over `axes`
    ReduceProd { axes: Vec<usize> },
    /// logical and over `axes` (bool)
    ReduceAnd { axes: Vec<usize> },
    /// logical or over `axes` (bool)
    ReduceOr { axes: Vec<usize> },
    /// index of the first maximum along `axes` (one axis); NaN counts as the maximum
    ArgMax { axes: Vec<usize>, index_dtype: DType },
    /// index of the first minimum along `axes` (one axis); NaN counts as the minimum
    ArgMin { axes: Vec<usize>, index_dtype: DType },
    /// running reduction along `axis` (cumsum/cumprod/cummax/cummin), from the end if `reverse`
    Cumulative { op: CumOp, axis: usize, reverse: bool },
    /// join operands (equal but for `dimension`) along `dimension`
    Concatenate { dimension: usize },
    /// pad with the second operand (0-d): (low, high, interior) per dim; negative trims
    Pad { padding_config: Vec<(i64, i64, i64)> },
    /// reverse along `dimensions`
    Rev { dimensions: Vec<usize> },
    /// drop `dimensions` (each of size 1)
    Squeeze { dimensions: Vec<usize> },
    /// static strided slice [start, limit) with `strides` (None = all 1)
    Slice { start_indices: Vec<usize>, limit_indices: Vec<usize>, strides: Option<Vec<usize>> },
    /// slice of `slice_sizes` at run-time start indices (operands: x, one 0-d int per dim), clamped in range
    DynamicSlice { slice_sizes: Vec<usize> },
    /// x with `update` written at run-time start indices (operands: x, update, one 0-d int per dim), clamped
    DynamicUpdateSlice,
    /// split along `axis` into pieces of `sizes` (one output per size)
    Split { sizes: Vec<usize>, axis: usize },
    /// XLA gather (operands: x, indices with the index vector last)
    Gather { dimension_numbers: GatherDims, slice_sizes: Vec<usize>, mode: GatherMode, fill_value: Option<f64>, indices_are_sorted: bool, unique_indices: bool },
    /// XLA scatter (operands: x, indices, updates) combining with `op`
    Scatter { op: ScatterOp, dimension_numbers: ScatterDims, mode: GatherMode, indices_are_sorted: bool, unique_indices: bool },
    /// sort all operands along `dimension` by the first `num_keys` (lexicographic); one output per operand
    Sort { dimension: usize, is_stable: bool, num_keys: usize },
    /// the k largest along the last dim, descending: outputs (values, int32 indices)
    TopK { k: usize },
    /// convolution (operands: lhs, rhs) with strides, padding, dilations and feature groups
    ConvGeneralDilated {
        window_strides: Vec<usize>,
        padding: Vec<(i64, i64)>,
        lhs_dilation: Vec<usize>,
        rhs_dilation: Vec<usize>,
        dimension_numbers: ConvDims,
        feature_group_count: usize,
        batch_group_count: usize,
        preferred_element_type: Option<DType>,
    },
    /// windowed reduction (pooling) with strides, padding and dilations
    ReduceWindow {
        op: WindowOp,
        window_dimensions: Vec<usize>,
        window_strides: Vec<usize>,
        padding: Vec<(i64, i64)>,
        base_dilation: Vec<usize>,
        window_dilation: Vec<usize>,
    },
    // -- shard_map (issue 6) --
    /// a collective over named mesh axes inside `shard_map` (`psum`, `all_gather`, ...)
    Collective(super::parallel::Collective),
    /// `shard_map`: the body runs once per device of the mesh on its blocks
    ShardMap(Box<super::parallel::ShardMapParams>),
}

impl Primitive {
    /// JAX's primitive name.
    pub fn name(&self) -> &'static str {
        use Primitive::*;
        match self {
            Neg => "neg",
            Exp => "exp",
            Log => "log",
            Sin => "sin",
            Cos => "cos",
            Tan => "tan",
            Tanh => "tanh",
            Sqrt => "sqrt",
            Abs => "abs",
            Not => "not",
            Add => "add",
            AddAny => "add_any",
            Sub => "sub",
            Mul => "mul",
            Div => "div",
            Rem => "rem",
            Pow => "pow",
            Max => "max",
            Min => "min",
            And => "and",
            Or => "or",
            Eq => "eq",
            Ne => "ne",
            Lt => "lt",
            Le => "le",
            Gt => "gt",
            Ge => "ge",
            SelectN => "select_n",
            ConvertElementType { .. } => "convert_element_type",
            BroadcastInDim { .. } => "broadcast_in_dim",
            Reshape { .. } => "reshape",
            Transpose { .. } => "transpose",
            Iota { .. } => "iota",
            ReduceSum { .. } => "reduce_sum",
            ReduceMax { .. } => "reduce_max",
            ReduceMin { .. } => "reduce_min",
            DotGeneral { .. } => "dot_general",
            StopGradient => "stop_gradient",
            ShardingConstraint { .. } => "sharding_constraint",
            DevicePut { .. } => "device_put",
            Cond { .. } => "cond",
            While { .. } => "while",
            Scan { .. } => "scan",
            CustomJvpCall { .. } => "custom_jvp_call",
            CustomVjpCall { .. } => "custom_vjp_call",
            Checkpoint { .. } => "remat2",
            DebugCallback { .. } => "debug_callback",
            PureCallback { .. } => "pure_callback",
            IoCallback { .. } => "io_callback",
            Pjit { .. } => "jit",
            // -- random / bits --
            ShiftLeft => "shift_left",
            ShiftRightLogical => "shift_right_logical",
            ShiftRightArithmetic => "shift_right_arithmetic",
            BitcastConvertType { .. } => "bitcast_convert_type",
            ErfInv => "erf_inv",
            NextAfter => "nextafter",
            // -- issue 3 array ops --
            Sign => "sign",
            Floor => "floor",
            Ceil => "ceil",
            Round { .. } => "round",
            IsFinite => "is_finite",
            Log1p => "log1p",
            Expm1 => "expm1",
            Logistic => "logistic",
            Erf => "erf",
            IntegerPow { .. } => "integer_pow",
            Xor => "xor",
            ReducePrecision { .. } => "reduce_precision",
            ReduceProd { .. } => "reduce_prod",
            ReduceAnd { .. } => "reduce_and",
            ReduceOr { .. } => "reduce_or",
            ArgMax { .. } => "argmax",
            ArgMin { .. } => "argmin",
            Cumulative { op: CumOp::Sum, .. } => "cumsum",
            Cumulative { op: CumOp::Prod, .. } => "cumprod",
            Cumulative { op: CumOp::Max, .. } => "cummax",
            Cumulative { op: CumOp::Min, .. } => "cummin",
            Concatenate { .. } => "concatenate",
            Pad { .. } => "pad",
            Rev { .. } => "rev",
            Squeeze { .. } => "squeeze",
            Slice { .. } => "slice",
            DynamicSlice { .. } => "dynamic_slice",
            DynamicUpdateSlice => "dynamic_update_slice",
            Split { .. } => "split",
            Gather { .. } => "gather",
            Scatter { op: ScatterOp::Set, .. } => "scatter",
            Scatter { op: ScatterOp::Add, .. } => "scatter-add",
            Scatter { op: ScatterOp::Mul, .. } => "scatter-mul",
            Scatter { op: ScatterOp::Min, .. } => "scatter-min",
            Scatter { op: ScatterOp::Max, .. } => "scatter-max",
            Sort { .. } => "sort",
            TopK { .. } => "top_k",
            ConvGeneralDilated { .. } => "conv_general_dilated",
            ReduceWindow { op: WindowOp::Sum, .. } => "reduce_window_sum",
            ReduceWindow { op: WindowOp::Max, .. } => "reduce_window_max",
            ReduceWindow { op: WindowOp::Min, .. } => "reduce_window_min",
            Collective(c) => c.name(),
            ShardMap(_) => "shard_map",
        }
    }

    /// True for primitives with side effects (never dead-code eliminated, run in order).
    pub fn has_effects(&self) -> bool {
        match self {
            Primitive::DebugCallback { .. } | Primitive::IoCallback { .. } => true,
            Primitive::Pjit { jaxpr, .. } => jaxpr.jaxpr.has_effects(),
            p => p.sub_jaxprs().iter().any(|j| j.has_effects()),
        }
    }

    /// The sub-jaxprs of a control-flow or nested-call primitive, in print order.
    pub fn sub_jaxprs(&self) -> Vec<&Jaxpr> {
        match self {
            Primitive::Cond { branches } => branches.iter().collect(),
            Primitive::While { cond_jaxpr, body_jaxpr, .. } => vec![body_jaxpr, cond_jaxpr],
            Primitive::Scan { jaxpr, .. } => vec![jaxpr],
            Primitive::CustomJvpCall { call_jaxpr, .. } | Primitive::CustomVjpCall { call_jaxpr, .. } => vec![call_jaxpr],
            Primitive::Checkpoint { jaxpr, .. } => vec![jaxpr],
            Primitive::Pjit { jaxpr, .. } => vec![&jaxpr.jaxpr],
            Primitive::ShardMap(p) => vec![&p.jaxpr],
            _ => vec![],
        }
    }

    /// Primitives with a number of outputs other than one that lowering handles in
    /// `lower::array_ops` (`sort`, `top_k`, `split`).
    pub fn is_multi_output_array_op(&self) -> bool {
        matches!(self, Primitive::Sort { .. } | Primitive::TopK { .. } | Primitive::Split { .. })
    }

    /// The inlinable body of a call-like primitive (custom rules, checkpoint), which
    /// takes the equation's operands and gives its outputs.
    pub fn call_body(&self) -> Option<&Jaxpr> {
        match self {
            Primitive::CustomJvpCall { call_jaxpr, .. } | Primitive::CustomVjpCall { call_jaxpr, .. } => Some(call_jaxpr),
            Primitive::Checkpoint { jaxpr, .. } => Some(jaxpr),
            _ => None,
        }
    }

    /// Elementwise primitives with one operand.
    pub fn is_unary_elementwise(&self) -> bool {
        use Primitive::*;
        matches!(self, Neg | Exp | Log | Sin | Cos | Tan | Tanh | Sqrt | Abs | Not | ErfInv)
    }

    /// Elementwise primitives with two operands of one shape.
    pub fn is_binary_elementwise(&self) -> bool {
        use Primitive::*;
        matches!(
            self,
            Add | AddAny | Sub | Mul | Div | Rem | Pow | Max | Min | And | Or | Eq | Ne | Lt | Le | Gt | Ge | Xor | ShiftLeft | ShiftRightLogical | ShiftRightArithmetic | NextAfter
        )
    }

    /// Comparisons (bool result).
    pub fn is_comparison(&self) -> bool {
        use Primitive::*;
        matches!(self, Eq | Ne | Lt | Le | Gt | Ge)
    }
}

/// One equation `outputs = primitive[params] inputs`.
#[derive(Clone, Debug, PartialEq)]
pub struct Eqn {
    pub primitive: Primitive,
    pub inputs: Vec<Atom>,
    pub outputs: Vec<Var>,
    pub source: Option<SourceInfo>,
    /// `jax.named_scope` names active when the equation was traced (`outer/inner`); not
    /// printed in the jaxpr, written as MLIR locations by lowering.
    pub name_stack: Option<std::sync::Arc<str>>,
    /// Op metadata (`set_xla_metadata`) active when the equation was traced, rendered as
    /// an MLIR dictionary `{mhlo.frontend_attributes = {k = "v"}}`; not printed in the
    /// jaxpr, written on the lowered ops' locations.
    pub metadata: Option<std::sync::Arc<str>>,
}

/// A jaxpr: `{ lambda constvars ; invars. let eqns in (outvars,) }`.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Jaxpr {
    pub constvars: Vec<Var>,
    pub invars: Vec<Var>,
    pub eqns: Vec<Eqn>,
    pub outvars: Vec<Atom>,
}

impl Jaxpr {
    /// Whether any equation (or sub-jaxpr) has effects.
    pub fn has_effects(&self) -> bool {
        self.eqns.iter().any(|e| e.primitive.has_effects())
    }
    pub fn in_avals(&self) -> Vec<ShapedArray> {
        self.invars.iter().map(|v| v.aval.clone()).collect()
    }
    pub fn out_avals(&self) -> Vec<ShapedArray> {
        self.outvars.iter().map(|a| a.aval().clone()).collect()
    }
}

/// A jaxpr with the values of its constvars (arrays captured by the traced closure).
/// `{}` and `{:?}` both give JAX's text (as `str` and `repr` of a ClosedJaxpr do).
#[derive(Clone)]
pub struct ClosedJaxpr {
    pub jaxpr: Jaxpr,
    /// One buffer per `jaxpr.constvars`, same order.
    pub consts: Vec<Arc<Buffer>>,
    /// Display only: the argument types of the traced call when some argument was sharded
    /// over an explicit mesh or in pinned host memory, so the text shows JAX's typed
    /// values (`f32[8@x]`, `f32<host>[8]`; `sharding_types`). `None` for every other
    /// jaxpr; ignored by equality, caches and lowering.
    pub in_types: Option<Arc<crate::sharding_types::InTypes>>,
}

impl std::fmt::Debug for ClosedJaxpr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl PartialEq for ClosedJaxpr {
    fn eq(&self, other: &Self) -> bool {
        self.jaxpr == other.jaxpr
            && self.consts.len() == other.consts.len()
            && self.consts.iter().zip(&other.consts).all(|(a, b)| Arc::ptr_eq(a, b) || a.bytes() == b.bytes())
    }
}
