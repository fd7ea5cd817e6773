//! Abstract values: `ShapedArray` (shape, dtype, weak type), the type a tracer carries.
//!
//! Two spellings, as in JAX: jaxpr text uses the short form `f32[4,8]`; `typeof` and
//! `ShapedArray(...)` reprs use `float32[4,8]`, with a `~` prefix for weak types.

use super::dtype::DType;
use std::fmt;

/// The abstract value of an array: what tracing knows about it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ShapedArray {
    /// Dimension sizes, outermost first; empty for a 0-d array.
    pub shape: Vec<usize>,
    pub dtype: DType,
    /// A weakly typed value (from a Rust literal) adopts the dtype of the other operand
    /// in binary ops. See <https://docs.jax.dev/en/latest/type_promotion.html#weak-types>.
    pub weak_type: bool,
}

impl ShapedArray {
    pub fn new(shape: &[usize], dtype: DType) -> Self {
        ShapedArray { shape: shape.to_vec(), dtype, weak_type: false }
    }
    pub fn weak(shape: &[usize], dtype: DType) -> Self {
        ShapedArray { shape: shape.to_vec(), dtype, weak_type: true }
    }
    pub fn scalar(dtype: DType) -> Self {
        ShapedArray::new(&[], dtype)
    }
    /// Number of dimensions.
    pub fn ndim(&self) -> usize {
        self.shape.len()
    }
    /// Number of elements (1 for 0-d).
    pub fn size(&self) -> usize {
        self.shape.iter().product()
    }
    /// Size of the array data in bytes.
    pub fn nbytes(&self) -> usize {
        self.size() * self.dtype.size_bytes()
    }
    /// The same type without the weak flag.
    pub fn strong(&self) -> Self {
        ShapedArray { weak_type: false, ..self.clone() }
    }
    /// Short form used in jaxprs: `f32[4,8]`.
    pub fn short(&self) -> String {
        format!("{}[{}]", self.dtype.short_name(), dims(&self.shape))
    }
    /// Long form used by `typeof`: `float32[4,8]`, `~float32[]` when weak.
    pub fn long(&self) -> String {
        format!("{}{}[{}]", if self.weak_type { "~" } else { "" }, self.dtype.name(), dims(&self.shape))
    }
    /// The MLIR tensor type: `tensor<4x8xf32>`, `tensor<f32>` for 0-d.
    pub fn mlir_tensor(&self) -> String {
        let mut s = String::from("tensor<");
        for d in &self.shape {
            s.push_str(&format!("{d}x"));
        }
        s.push_str(self.dtype.mlir());
        s.push('>');
        s
    }
}

fn dims(shape: &[usize]) -> String {
    shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(",")
}

impl fmt::Display for ShapedArray {
    /// The `typeof` text, `float32[3]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.long())
    }
}

/// A shape and dtype without data: an argument spec for `trace`/`lower`/`eval_shape`
/// (JAX's `jax.ShapeDtypeStruct`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ShapeDtypeStruct {
    pub shape: Vec<usize>,
    pub dtype: DType,
    pub weak_type: bool,
}

impl ShapeDtypeStruct {
    pub fn new(shape: &[usize], dtype: DType) -> Self {
        ShapeDtypeStruct { shape: shape.to_vec(), dtype, weak_type: false }
    }
    pub fn aval(&self) -> ShapedArray {
        ShapedArray { shape: self.shape.clone(), dtype: self.dtype, weak_type: self.weak_type }
    }
}

impl fmt::Display for ShapeDtypeStruct {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shape = match self.shape.len() {
            0 => "()".to_string(),
            1 => format!("({},)", self.shape[0]),
            _ => format!("({})", self.shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
        };
        write!(f, "ShapeDtypeStruct(shape={shape}, dtype={}", self.dtype.name())?;
        if self.weak_type {
            write!(f, ", weak_type=True")?;
        }
        write!(f, ")")
    }
}
