//! Text emission helpers for lowering: an SSA-numbering line writer and the spelling of
//! MLIR literals (scalars, dense tensors, affine maps).
//!
//! Invariant: every SSA name an `Emitter` hands out is unique within the function it
//! writes (nested regions included), and every literal it spells parses back to exactly
//! the same bits (floats that are not finite, and all f16/bf16 values, are written as
//! hexadecimal bit patterns).

use crate::ir::{DType, Scalar};
use crate::runtime::buffer::f16_to_f32;

/// A line writer for one function body with a single SSA counter.
pub(crate) struct Emitter {
    pub text: String,
    next: usize,
    indent: usize,
    /// Location written after every one-line op, as the text inside `loc(...)`
    /// (`"jit(f)/scope/prim"`, or a `fused<{metadata}>["..."]` location): the equation's
    /// `jax.named_scope` stack and op metadata, set while lowering an equation that has one.
    pub loc: Option<String>,
    /// Set while the body of an elementwise `linalg.generic` that runs often enough for
    /// inline trigonometry to pay for its compile time is emitted (see
    /// `approx::unary_for`); clear for plain scalar code and small one-shot generics.
    pub inline_trig: bool,
    /// How many `while`/`scan` bodies enclose the code being emitted.
    pub loop_depth: usize,
}

impl Emitter {
    pub fn new(indent: usize) -> Emitter {
        Emitter { text: String::new(), next: 0, indent, loc: None, inline_trig: false, loop_depth: 0 }
    }
    /// A fresh SSA name `%N` (or `%<prefix>N`).
    pub fn fresh(&mut self, prefix: &str) -> String {
        let n = self.next;
        self.next += 1;
        format!("%{prefix}{n}")
    }
    /// Writes one line at the current indentation.
    pub fn line(&mut self, s: &str) {
        for _ in 0..self.indent {
            self.text.push_str("  ");
        }
        self.text.push_str(s);
        self.text.push('\n');
    }
    /// Writes `%N = <rhs>` and returns `%N`.
    pub fn op(&mut self, rhs: &str) -> String {
        let n = self.fresh("");
        match &self.loc {
            // A region opener (`... {`) takes its location after the closing brace; those
            // are left without one.
            Some(l) if !rhs.trim_end().ends_with('{') && !rhs.contains('\n') => {
                let line = format!("{n} = {rhs} loc({l})");
                self.line(&line)
            }
            _ => self.line(&format!("{n} = {rhs}")),
        }
        n
    }
    pub fn push(&mut self) {
        self.indent += 1;
    }
    pub fn pop(&mut self) {
        self.indent -= 1;
    }
    /// A scalar `arith.constant` of `dtype` from a literal spelling.
    pub fn scalar_const(&mut self, lit: &str, dtype: DType) -> String {
        if dtype == DType::Bool {
            // `true`/`false` carry their type; `true : i1` does not parse.
            return self.op(&format!("arith.constant {lit}"));
        }
        self.op(&format!("arith.constant {lit} : {}", dtype.mlir()))
    }
}

/// The MLIR spelling of a float value of `dtype` (`1.0`, `-2.5e-10`, `0x7F800000`).
pub(crate) fn float_lit(v: f64, dtype: DType) -> String {
    match dtype {
        DType::F16 | DType::BF16 => {
            let b = Scalar::F64(v).to_bytes(dtype);
            format!("0x{:04X}", u16::from_le_bytes([b[0], b[1]]))
        }
        DType::F64 => {
            if v.is_finite() {
                with_point(format!("{v:?}"))
            } else {
                format!("0x{:016X}", v.to_bits())
            }
        }
        _ => {
            let f = v as f32;
            if f.is_finite() {
                with_point(format!("{f:?}"))
            } else {
                format!("0x{:08X}", f.to_bits())
            }
        }
    }
}

/// MLIR's float grammar needs a `.` before any exponent: `1e-10` becomes `1.0e-10`.
fn with_point(s: String) -> String {
    if s.contains('.') {
        return s;
    }
    match s.find('e') {
        Some(i) => format!("{}.0{}", &s[..i], &s[i..]),
        None => format!("{s}.0"),
    }
}

/// The MLIR spelling of an integer or bool value of `dtype` (`true`, `-1`). Unsigned values
/// are written as their two's-complement signed reinterpretation (MLIR integers are signless).
pub(crate) fn int_lit(v: i64, dtype: DType) -> String {
    match dtype {
        DType::Bool => if v != 0 { "true".into() } else { "false".into() },
        DType::I8 | DType::U8 => (v as i8).to_string(),
        DType::I16 => (v as i16).to_string(),
        DType::I32 | DType::U32 => (v as i32).to_string(),
        _ => v.to_string(),
    }
}

/// The literal spelling of a host scalar converted to `dtype`.
pub(crate) fn scalar_lit(value: Scalar, dtype: DType) -> String {
    if dtype.is_float() {
        float_lit(value.as_f64(), dtype)
    } else {
        let v = match value {
            Scalar::F32(_) | Scalar::F64(_) => value.cast(DType::I64).as_i64(),
            _ => value.as_i64(),
        };
        int_lit(v, dtype)
    }
}

/// Element `i` of little-endian array bytes of `dtype`, spelled as an MLIR literal.
pub(crate) fn element_lit(bytes: &[u8], i: usize, dtype: DType) -> String {
    let n = dtype.size_bytes();
    let b = &bytes[i * n..(i + 1) * n];
    match dtype {
        DType::Bool => int_lit(b[0] as i64, dtype),
        DType::I8 => int_lit(b[0] as i8 as i64, dtype),
        DType::U8 => int_lit(b[0] as i64, dtype),
        DType::I16 => int_lit(i16::from_le_bytes([b[0], b[1]]) as i64, dtype),
        DType::I32 | DType::U32 => int_lit(i32::from_le_bytes(b.try_into().unwrap()) as i64, dtype),
        DType::I64 => int_lit(i64::from_le_bytes(b.try_into().unwrap()), dtype),
        DType::F16 | DType::BF16 => format!("0x{:04X}", u16::from_le_bytes([b[0], b[1]])),
        DType::F32 => float_lit(f32::from_le_bytes(b.try_into().unwrap()) as f64, dtype),
        DType::F64 => float_lit(f64::from_le_bytes(b.try_into().unwrap()), dtype),
    }
}

/// A `dense<...>` attribute body for array bytes of `shape`/`dtype`: nested lists in
/// row-major order, a splat when all elements are equal, `dense<>` when empty.
pub(crate) fn dense_lit(bytes: &[u8], shape: &[usize], dtype: DType) -> String {
    let size: usize = shape.iter().product();
    if size == 0 {
        return "dense<>".into();
    }
    let n = dtype.size_bytes();
    if bytes.chunks(n).all(|c| c == &bytes[..n]) {
        return format!("dense<{}>", element_lit(bytes, 0, dtype));
    }
    fn rec(bytes: &[u8], shape: &[usize], dtype: DType, start: usize, out: &mut String) {
        if shape.is_empty() {
            out.push_str(&element_lit(bytes, start, dtype));
            return;
        }
        let inner: usize = shape[1..].iter().product();
        out.push('[');
        for i in 0..shape[0] {
            if i > 0 {
                out.push_str(", ");
            }
            rec(bytes, &shape[1..], dtype, start + i * inner, out);
        }
        out.push(']');
    }
    let mut s = String::from("dense<");
    rec(bytes, shape, dtype, 0, &mut s);
    s.push('>');
    s
}

/// Half-precision bits to f64 (for tests and reference code).
#[allow(dead_code)]
pub(crate) fn half_to_f64(bits: u16, dtype: DType) -> f64 {
    match dtype {
        DType::BF16 => f32::from_bits((bits as u32) << 16) as f64,
        _ => f16_to_f32(bits) as f64,
    }
}

/// `affine_map<(d0, d1) -> (d1, 0)>` from the number of loop dims and result expressions.
pub(crate) fn affine_map(ndims: usize, results: &[String]) -> String {
    let dims: Vec<String> = (0..ndims).map(|i| format!("d{i}")).collect();
    format!("affine_map<({}) -> ({})>", dims.join(", "), results.join(", "))
}

/// The identity map over `n` loop dims.
pub(crate) fn identity_map(n: usize) -> String {
    let r: Vec<String> = (0..n).map(|i| format!("d{i}")).collect();
    affine_map(n, &r)
}

/// `["parallel", "parallel", "reduction"]`.
pub(crate) fn iterator_types(kinds: &[&str]) -> String {
    let k: Vec<String> = kinds.iter().map(|k| format!("\"{k}\"")).collect();
    format!("[{}]", k.join(", "))
}

/// `[0, 1, 2]` for index lists.
pub(crate) fn int_list(xs: &[usize]) -> String {
    let v: Vec<String> = xs.iter().map(|x| x.to_string()).collect();
    format!("[{}]", v.join(", "))
}

/// `memref<4x8xf32>` / `memref<f32>`: the memref type matching a tensor type.
pub(crate) fn memref_of(tensor_ty: &str) -> String {
    tensor_ty.replacen("tensor<", "memref<", 1)
}
