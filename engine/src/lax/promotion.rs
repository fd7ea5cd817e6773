//! JAX's type promotion lattice (`jnp.promote_types`, and the result type of binary ops
//! with weakly typed operands), following
//! <https://docs.jax.dev/en/latest/type_promotion.html>.
//!
//! The lattice has a node per dtype plus the weak kinds `i*` (a Rust integer literal)
//! and `f*` (a Rust float literal); the result of two types is their least upper bound:
//!
//! ```text
//! bool → i* → u8 → u16 → u32 → u64 → f*        i* → i8 → i16 → i32 → i64 → f*
//!        u8 → i16, u16 → i32, u32 → i64        f* → bf16 → f32, f* → f16 → f32 → f64
//! ```
//!
//! (`u16`/`u64` are not dtypes of this engine but keep their places in the lattice, so
//! `u32 ⊔ i32 = i64`.) An operand is weak when its `ShapedArray::weak_type` is set, whatever
//! its dtype's width. The result is weak when the bound is `i*`/`f*` (then its dtype is
//! the default int/float) or when every operand is weak. 64-bit results become 32-bit
//! while `jax_enable_x64` is off (`canonicalize_dtype`), as in JAX.

use crate::ir::DType;

/// Lattice nodes, in a topological order (every edge goes to a larger index).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Node {
    B,
    IW,
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    U64,
    I64,
    FW,
    BF16,
    F16,
    F32,
    F64,
}

const N: usize = 15;

fn succ(n: Node) -> &'static [Node] {
    use Node::*;
    match n {
        B => &[IW],
        IW => &[U8, I8],
        U8 => &[I16, U16],
        U16 => &[I32, U32],
        U32 => &[I64, U64],
        U64 => &[FW],
        I8 => &[I16],
        I16 => &[I32],
        I32 => &[I64],
        I64 => &[FW],
        FW => &[BF16, F16],
        BF16 => &[F32],
        F16 => &[F32],
        F32 => &[F64],
        F64 => &[],
    }
}

const ALL: [Node; N] = [
    Node::B,
    Node::IW,
    Node::U8,
    Node::I8,
    Node::U16,
    Node::I16,
    Node::U32,
    Node::I32,
    Node::U64,
    Node::I64,
    Node::FW,
    Node::BF16,
    Node::F16,
    Node::F32,
    Node::F64,
];

fn idx(n: Node) -> usize {
    ALL.iter().position(|&m| m == n).expect("node")
}

/// Bit set of the nodes at or above `n`.
fn upper(n: Node) -> u32 {
    let mut set = 1u32 << idx(n);
    for &s in succ(n) {
        set |= upper(s);
    }
    set
}

fn node(d: DType, weak: bool) -> Node {
    use Node::*;
    match d {
        DType::Bool => B,
        _ if weak && d.is_int() => IW,
        _ if weak && d.is_float() => FW,
        DType::U8 => U8,
        DType::U32 => U32,
        DType::I8 => I8,
        DType::I16 => I16,
        DType::I32 => I32,
        DType::I64 => I64,
        DType::BF16 => BF16,
        DType::F16 => F16,
        DType::F32 => F32,
        DType::F64 => F64,
    }
}

/// The least upper bound: the smallest node above both (unique in this lattice).
fn join(a: Node, b: Node) -> Node {
    let common = upper(a) & upper(b);
    // In topological order the first common node is below every other common node.
    ALL[common.trailing_zeros() as usize]
}

/// The dtype of a node: weak kinds are the default int/float (64-bit before
/// canonicalization); `u16`/`u64` cannot be results of two engine dtypes below `f*`
/// except through `u64`, which JAX only reaches from unsigned 64-bit operands.
fn dtype_of(n: Node) -> DType {
    use Node::*;
    match n {
        B => DType::Bool,
        IW | I64 | U64 => DType::I64,
        U8 => DType::U8,
        U16 | I32 => DType::I32,
        U32 => DType::U32,
        I8 => DType::I8,
        I16 => DType::I16,
        FW | F64 => DType::F64,
        BF16 => DType::BF16,
        F16 => DType::F16,
        F32 => DType::F32,
    }
}

/// The promoted dtype and weak flag of two operand types `(dtype, weak)`, before
/// `jax_enable_x64` canonicalization (JAX's `_lattice_result_type` for two operands).
pub fn promote_lattice(a: (DType, bool), b: (DType, bool)) -> (DType, bool) {
    let (r, weak) = if a.0 == b.0 && a.1 && b.1 {
        (a.0, true)
    } else if a.1 && b.1 {
        // All weak: the bound of the strong counterparts, made weak.
        (dtype_of(join(node(a.0, false), node(b.0, false))), true)
    } else {
        let j = join(node(a.0, a.1), node(b.0, b.1));
        (dtype_of(j), matches!(j, Node::IW | Node::FW))
    };
    (r, weak && r != DType::Bool)
}

/// `jnp.promote_types(a, b)` for two (strong) dtypes, canonicalized for
/// `jax_enable_x64` as JAX's is: `promote_types(U32, I32)` is `I64`, or `I32` with x64 off.
pub fn promote_types(a: DType, b: DType) -> DType {
    crate::trace::array::canonicalize_dtype(promote_lattice((a, false), (b, false)).0)
}

/// JAX's warning for an explicitly requested 64-bit dtype while `jax_enable_x64` is off
/// (`dtypes.check_user_dtype_supported`), e.g. `UserWarning: Explicitly requested dtype
/// float64 requested in zeros is not available, and will be truncated to dtype float32. ...`.
pub fn x64_truncation_warning(dtype: DType, fun_name: &str) -> String {
    format!(
        "UserWarning: Explicitly requested dtype {} requested in {fun_name} is not available, and will be truncated to dtype {}. \
         To enable more dtypes, set the jax_enable_x64 configuration option or the JAX_ENABLE_X64 shell environment variable. \
         See https://github.com/jax-ml/jax#current-gotchas for more.",
        dtype.name(),
        crate::trace::array::canonicalize_dtype(dtype).name()
    )
}

/// The dtype an explicit request for `dtype` in `fun_name` (`"zeros"`, `"astype"`, ...)
/// gets: `dtype` itself, or its 32-bit counterpart while `jax_enable_x64` is off, in which
/// case JAX's `UserWarning` is printed on stderr and recorded
/// (`jax::transform::jit::warnings_issued`), once per call site, dtype and function, as
/// Python's default warning filter shows it once per source line. The call site is the
/// caller's location through `#[track_caller]` functions (the user's line for `jnp::zeros`).
#[track_caller]
pub fn check_user_dtype_supported(dtype: DType, fun_name: &str) -> DType {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};
    // The site as shown (`cell N, line L` in the REPL): every cell's generated source is
    // `src/lib.rs`, so its raw file and line would merge sites of different cells.
    type Site = (DType, String, String);
    static SEEN: OnceLock<Mutex<HashSet<Site>>> = OnceLock::new();
    let c = crate::trace::array::canonicalize_dtype(dtype);
    if c != dtype {
        let at = std::panic::Location::caller();
        let first = SEEN
            .get_or_init(|| Mutex::new(HashSet::new()))
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((dtype, fun_name.to_string(), crate::trace::source_info(at).to_string()));
        if first {
            let text = x64_truncation_warning(dtype, fun_name);
            crate::transform::jit::warn(text.trim_start_matches("UserWarning: ").to_string());
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lattice_basics() {
        assert_eq!(promote_lattice((DType::U32, false), (DType::I32, false)), (DType::I64, false));
        assert_eq!(promote_lattice((DType::I64, false), (DType::F32, false)), (DType::F32, false));
        assert_eq!(promote_lattice((DType::BF16, false), (DType::F16, false)), (DType::F32, false));
        assert_eq!(promote_lattice((DType::I32, false), (DType::F32, true)), (DType::F64, true));
        assert_eq!(promote_lattice((DType::U8, false), (DType::I32, true)), (DType::U8, false));
        assert_eq!(promote_lattice((DType::Bool, false), (DType::I32, true)), (DType::I64, true));
        assert_eq!(promote_lattice((DType::F16, false), (DType::F32, true)), (DType::F16, false));
        assert_eq!(promote_lattice((DType::I32, true), (DType::F32, true)), (DType::F32, true));
    }
}
