//! The jaxpr: JAX's typed, first-order intermediate language.
//!
//! A `Jaxpr` is a list of equations `outs = prim[params] ins` over variables with
//! `ShapedArray` types; a `ClosedJaxpr` adds the constant values for its `constvars`.
//! Invariant: every `Var` is defined once (as a constvar, an invar or an equation
//! output) before it is used, and equation outputs carry the types abstract evaluation
//! gave them. See <https://docs.jax.dev/en/latest/jaxpr.html>.

use super::aval::ShapedArray;
use super::dtype::{DType, Scalar};
use crate::runtime::Buffer;
use std::sync::Arc;

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
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SourceInfo {
    pub file: String,
    pub line: u32,
    pub column: u32,
}

/// Identifier of a host callback registered with the runtime (`debug::print`, ...).
pub type CallbackId = u64;

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
        preferred_element_type: Option<DType>,
    },
    // -- transformations --
    /// identity whose cotangent and tangent are zero (`jax.lax.stop_gradient`)
    StopGradient,
    // -- control flow: sub-jaxprs are closed over nothing; their constants are leading operands --
    /// `cond[branches] index *ops`: runs branch `clamp(index, 0, n-1)` on `ops`
    Cond { branches: Vec<Jaxpr> },
    /// `while[...] *cond_consts *body_consts *init`: repeats `body` while `cond` is true
    While { cond_jaxpr: Box<Jaxpr>, body_jaxpr: Box<Jaxpr>, cond_nconsts: usize, body_nconsts: usize },
    /// `scan[...] *consts *init *xs` → `*carry *ys`: a loop over the leading axis of `xs`
    Scan { jaxpr: Box<Jaxpr>, length: usize, reverse: bool, unroll: usize, num_consts: usize, num_carry: usize },
    // -- effects and nesting --
    /// host callback with the operands (no outputs): `debug::print`
    DebugCallback { callback: CallbackId, fmt: String },
    /// a nested jitted call
    Pjit { name: String, jaxpr: Box<ClosedJaxpr> },
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
            Tanh => "tanh",
            Sqrt => "sqrt",
            Abs => "abs",
            Not => "not",
            Add => "add",
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
            Cond { .. } => "cond",
            While { .. } => "while",
            Scan { .. } => "scan",
            DebugCallback { .. } => "debug_callback",
            Pjit { .. } => "jit",
        }
    }

    /// True for primitives with side effects (never dead-code eliminated, run in order).
    pub fn has_effects(&self) -> bool {
        match self {
            Primitive::DebugCallback { .. } => true,
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
            Primitive::Pjit { jaxpr, .. } => vec![&jaxpr.jaxpr],
            _ => vec![],
        }
    }

    /// Elementwise primitives with one operand.
    pub fn is_unary_elementwise(&self) -> bool {
        use Primitive::*;
        matches!(self, Neg | Exp | Log | Sin | Cos | Tanh | Sqrt | Abs | Not)
    }

    /// Elementwise primitives with two operands of one shape.
    pub fn is_binary_elementwise(&self) -> bool {
        use Primitive::*;
        matches!(self, Add | Sub | Mul | Div | Rem | Pow | Max | Min | And | Or | Eq | Ne | Lt | Le | Gt | Ge)
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
#[derive(Clone, Debug)]
pub struct ClosedJaxpr {
    pub jaxpr: Jaxpr,
    /// One buffer per `jaxpr.constvars`, same order.
    pub consts: Vec<Arc<Buffer>>,
}

impl PartialEq for ClosedJaxpr {
    fn eq(&self, other: &Self) -> bool {
        self.jaxpr == other.jaxpr
            && self.consts.len() == other.consts.len()
            && self.consts.iter().zip(&other.consts).all(|(a, b)| Arc::ptr_eq(a, b) || a.bytes() == b.bytes())
    }
}
