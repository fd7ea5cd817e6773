//! `Array`: the user's array value, concrete (a future on the device) or traced.
//!
//! Concrete arrays are immutable and cheap to clone (an `Arc`). Reading values waits for
//! dispatched work. A traced array only has an abstract value: asking for its data is a
//! `TracerBoolConversionError`/`ConcretizationTypeError` naming the argument it came from.

use super::{tracer_provenance, Tracer};
use crate::config;
use crate::error::{Error, ErrorKind, Result};
use crate::ir::{DType, Scalar, ShapedArray};
use crate::runtime::{Buffer, DeviceArray};
use std::sync::Arc;

/// A JAX array: concrete (on the simulated CPU device, possibly still being computed)
/// or a tracer inside `jit`/`make_jaxpr`.
#[derive(Clone)]
pub struct Array(pub(crate) Repr);

#[derive(Clone)]
pub(crate) enum Repr {
    Device(Arc<DeviceArray>),
    Tracer(Tracer),
}

/// Rust element types that map to a dtype.
pub trait Element: Copy + Send + Sync + 'static {
    const DTYPE: DType;
    fn to_scalar(self) -> Scalar;
    fn from_f64(v: f64) -> Self;
}

macro_rules! element {
    ($t:ty, $d:expr, $s:ident, $conv:expr) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            fn to_scalar(self) -> Scalar {
                Scalar::$s(self as _)
            }
            fn from_f64(v: f64) -> Self {
                $conv(v)
            }
        }
    };
}
element!(f32, DType::F32, F32, |v: f64| v as f32);
element!(f64, DType::F64, F64, |v: f64| v);
element!(i32, DType::I32, I32, |v: f64| v as i32);
element!(i64, DType::I64, I64, |v: f64| v as i64);
element!(u8, DType::U8, I32, |v: f64| v as u8);
element!(i8, DType::I8, I32, |v: f64| v as i8);
element!(i16, DType::I16, I32, |v: f64| v as i16);
element!(u32, DType::U32, I64, |v: f64| v as u32);
/// bfloat16 host values (`half::bf16`): arrays of dtype bfloat16, stored bit for bit.
impl Element for half::bf16 {
    const DTYPE: DType = DType::BF16;
    fn to_scalar(self) -> Scalar {
        Scalar::F32(self.to_f32())
    }
    /// Rounds to the nearest bfloat16 (ties to even).
    fn from_f64(v: f64) -> Self {
        half::bf16::from_f64(v)
    }
}
/// IEEE half-precision host values (`half::f16`): arrays of dtype float16.
impl Element for half::f16 {
    const DTYPE: DType = DType::F16;
    fn to_scalar(self) -> Scalar {
        Scalar::F32(self.to_f32())
    }
    /// Rounds to the nearest float16 (ties to even).
    fn from_f64(v: f64) -> Self {
        half::f16::from_f64(v)
    }
}
impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn to_scalar(self) -> Scalar {
        Scalar::Bool(self)
    }
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
}

/// The dtype an array of `d` gets: with `jax_enable_x64` off (the default), 64-bit
/// types are truncated to 32 bits as in JAX.
pub fn canonicalize_dtype(d: DType) -> DType {
    if config::enable_x64() {
        return d;
    }
    match d {
        DType::F64 => DType::F32,
        DType::I64 => DType::I32,
        d => d,
    }
}

impl Array {
    pub(crate) fn from_device(d: Arc<DeviceArray>) -> Array {
        Array(Repr::Device(d))
    }

    /// An array from host data in row-major order. Errors if `data.len()` differs from
    /// the product of `shape`. 64-bit data becomes 32-bit while `jax_enable_x64` is off.
    pub fn from_vec<T: Element>(data: Vec<T>, shape: &[usize]) -> Result<Array> {
        let n: usize = shape.iter().product();
        if data.len() != n {
            return Err(Error::value_error(format!(
                "cannot make an array of shape {shape:?} ({n} elements) from {} values",
                data.len()
            )));
        }
        let src = ShapedArray::new(shape, T::DTYPE);
        let _span = crate::profiler::span("transfer", || format!("device_put {}", src.short()));
        let buf = Buffer::try_from_slice_at(&src, &data, crate::runtime::memory::SITE_HOST)?;
        let dtype = canonicalize_dtype(T::DTYPE);
        let buf = if dtype != T::DTYPE { convert_buffer(&buf, dtype) } else { buf };
        Ok(Array::from_buffer(buf, false))
    }

    /// A 1-d array copying `data`.
    pub fn from_slice<T: Element>(data: &[T]) -> Array {
        Array::from_vec(data.to_vec(), &[data.len()]).expect("length matches")
    }

    /// A 0-d array holding `v` (strongly typed).
    pub fn scalar<T: Element>(v: T) -> Array {
        Array::from_vec(vec![v], &[]).expect("one element")
    }

    /// A 0-d weakly typed array, as JAX makes from a Python scalar.
    pub fn weak_scalar(v: Scalar) -> Array {
        let dtype = match v {
            Scalar::F32(_) | Scalar::F64(_) => canonicalize_dtype(DType::F64),
            Scalar::I32(_) | Scalar::I64(_) => canonicalize_dtype(DType::I64),
            Scalar::Bool(_) => DType::Bool,
        };
        let aval = ShapedArray::weak(&[], dtype);
        let buf = Buffer::from_bytes(&aval, &v.to_bytes(dtype)).expect("scalar size");
        Array::from_buffer(buf, true)
    }

    /// Wraps a host buffer (already on the device: ready at once).
    pub fn from_buffer(buf: Buffer, weak_type: bool) -> Array {
        let mut aval = buf.aval().clone();
        aval.weak_type = weak_type;
        Array(Repr::Device(DeviceArray::ready(aval, Arc::new(buf))))
    }

    /// An array copying an `ndarray` array (any layout).
    pub fn from_ndarray<T: Element + Clone, D: ndarray::Dimension>(a: &ndarray::Array<T, D>) -> Array {
        let shape: Vec<usize> = a.shape().to_vec();
        let data: Vec<T> = a.iter().copied().collect();
        Array::from_vec(data, &shape).expect("shape matches")
    }

    /// The abstract value, borrowed.
    pub(crate) fn aval_ref(&self) -> &ShapedArray {
        match &self.0 {
            Repr::Device(d) => &d.aval,
            Repr::Tracer(t) => &t.var.aval,
        }
    }

    /// The abstract value (shape, dtype, weak type).
    pub fn aval(&self) -> ShapedArray {
        match &self.0 {
            Repr::Device(d) => d.aval.clone(),
            Repr::Tracer(t) => t.var.aval.clone(),
        }
    }
    pub fn shape(&self) -> Vec<usize> {
        self.aval().shape
    }
    pub fn ndim(&self) -> usize {
        self.aval().shape.len()
    }
    pub fn size(&self) -> usize {
        self.aval().size()
    }
    pub fn dtype(&self) -> DType {
        self.aval().dtype
    }
    pub fn weak_type(&self) -> bool {
        self.aval().weak_type
    }
    /// Whether this is a tracer (inside `jit`) rather than a concrete value.
    pub fn is_tracer(&self) -> bool {
        matches!(self.0, Repr::Tracer(_))
    }
    pub(crate) fn device(&self) -> Option<&Arc<DeviceArray>> {
        match &self.0 {
            Repr::Device(d) => Some(d),
            Repr::Tracer(_) => None,
        }
    }
    /// The address of the array's data (JAX's `unsafe_buffer_pointer`), waiting for it:
    /// shows that a donated buffer was reused. Errors: as `buffer`.
    pub fn unsafe_buffer_pointer(&self) -> Result<usize> {
        Ok(self.buffer()?.as_ptr() as usize)
    }
    /// Whether the array was donated and its buffer reused.
    pub fn is_deleted(&self) -> bool {
        self.device().map(|d| d.is_deleted()).unwrap_or(false)
    }

    /// Waits until the value has been computed and returns the array (JAX's
    /// `block_until_ready`). Errors: the computation's error, `KeyboardInterrupt`.
    pub fn block_until_ready(&self) -> Result<Array> {
        self.buffer()?;
        Ok(self.clone())
    }

    /// `jax.Array.is_ready`: whether the value (or the computation's error) is there, without
    /// waiting; a tracer is never ready.
    pub fn is_ready(&self) -> bool {
        match &self.0 {
            Repr::Device(d) => d.is_ready(),
            Repr::Tracer(_) => false,
        }
    }

    /// The host buffer, waiting for it. Errors for tracers with JAX's conversion error.
    pub fn buffer(&self) -> Result<Arc<Buffer>> {
        match &self.0 {
            Repr::Device(d) => d.wait(),
            Repr::Tracer(t) => Err(concretization_error(t, "the array's values")),
        }
    }

    /// The values as `T` (converted from the array's dtype as numpy's `astype` would).
    /// Errors: `ConcretizationTypeError` for a tracer, with the caller's line.
    #[track_caller]
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if let Repr::Tracer(t) = &self.0 {
            return Err(concretization_error(t, "the array's values").here());
        }
        let b = self.buffer()?;
        let _span = crate::profiler::span("transfer", || format!("device_get {}", b.aval().short()));
        Ok(b.to_f64_vec().into_iter().map(T::from_f64).collect())
    }

    /// The values as an `ndarray` array of the same shape.
    #[track_caller]
    pub fn to_ndarray<T: Element>(&self) -> Result<ndarray::ArrayD<T>> {
        let v = self.to_vec::<T>()?;
        ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&self.shape()), v).map_err(|e| Error::value_error(e.to_string()))
    }

    /// The single value of a size-1 array. Errors for other sizes and for tracers
    /// (`ConcretizationTypeError`).
    #[track_caller]
    pub fn item<T: Element>(&self) -> Result<T> {
        if let Repr::Tracer(t) = &self.0 {
            return Err(concretization_error(t, "a concrete value").here());
        }
        if self.size() != 1 && T::DTYPE == DType::Bool {
            return Err(Error::value_error(
                "The truth value of an array with more than one element is ambiguous. Use a.any() or a.all()",
            ));
        }
        if self.size() != 1 {
            return Err(Error::value_error(format!(
                "item() needs an array of size 1, got shape {}",
                self.aval().short()
            )));
        }
        Ok(self.to_vec::<T>()?[0])
    }

    /// The truth value of a size-1 array (Rust's analogue of Python's `bool(x)`).
    /// Errors: `TracerBoolConversionError` inside `jit` (use `lax::cond` or `jnp::where_`),
    /// located at the caller's line (the `if`), its message naming the traced function and
    /// where it was defined, as JAX's does.
    #[track_caller]
    pub fn to_bool(&self) -> Result<bool> {
        if let Repr::Tracer(t) = &self.0 {
            let (name, args) = tracer_provenance(t).unwrap_or_default();
            return Err(Error::new(
                ErrorKind::TracerBoolConversion,
                format!(
                    "Attempted boolean conversion of traced array with shape {}.\n\
                     The error occurred while tracing the function {}. {}\n\
                     Use jnp::where_ (or lax::cond) for value-dependent choices, or pass the value as a Static argument.\n\
                     See https://docs.jax.dev/en/latest/errors.html#jax.errors.TracerBoolConversionError",
                    t.var.aval.short(),
                    traced_function(&name),
                    depends_on(&args)
                ),
            )
            .here());
        }
        self.item::<bool>()
    }
}

fn depends_on(args: &[String]) -> String {
    match args.len() {
        0 => "This value was computed inside the traced function.".into(),
        1 => format!(
            "This concrete value was not available because it depends on the value of the argument {}.",
            args[0]
        ),
        _ => format!(
            "This concrete value was not available because it depends on the values of the arguments {}.",
            args.join(", ")
        ),
    }
}

fn concretization_error(t: &Tracer, what: &str) -> Error {
    let (name, args) = tracer_provenance(t).unwrap_or_default();
    Error::new(
        ErrorKind::Concretization,
        format!(
            "Abstract tracer value encountered where {what} was required: traced array with shape {}.\n\
             The error occurred while tracing the function {}. {}\n\
             See https://docs.jax.dev/en/latest/errors.html#jax.errors.ConcretizationTypeError",
            t.var.aval.short(),
            traced_function(&name),
            depends_on(&args)
        ),
    )
}

/// The traced function as error messages name it (JAX: `f at FILE:LINE for jit`): the
/// trace's name says the transformation (`f at cell 2, line 1 for grad`) or is a `jit`'s
/// (`f at cell 2, line 1`).
fn traced_function(name: &str) -> String {
    if name.contains(" for ") { name.to_string() } else { format!("{name} for jit") }
}

/// Converts a host buffer to another dtype on the host (numpy `astype` semantics).
pub(crate) fn convert_buffer(buf: &Buffer, dtype: DType) -> Buffer {
    let vals = buf.to_f64_vec();
    let aval = ShapedArray::new(buf.shape(), dtype);
    let mut bytes = Vec::with_capacity(aval.nbytes());
    for v in vals {
        bytes.extend(Scalar::F64(v).cast(dtype).to_bytes(dtype));
    }
    Buffer::from_bytes(&aval, &bytes).expect("sizes match")
}

impl std::fmt::Debug for Array {
    /// JAX's repr: `Array([0., 1.], dtype=float32)`; tracers as `JitTracer(float32[3])`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Repr::Tracer(t) => write!(f, "JitTracer({})", t.var.aval.long()),
            Repr::Device(d) => match d.wait() {
                Ok(b) => f.write_str(&crate::display::array_repr_of(&b, d.aval.weak_type)),
                Err(e) => write!(f, "Array(<{}>, shape={})", e, d.aval.long()),
            },
        }
    }
}

impl Array {
    /// The HTML table view of a concrete array (Jupyter's `text/html`; see
    /// `display::html`). `None` for a tracer or an array whose computation failed.
    pub fn html_repr(&self) -> Option<String> {
        match &self.0 {
            Repr::Tracer(_) => None,
            Repr::Device(d) => d.wait().ok().map(|b| crate::display::array_html_of(&b, d.aval.weak_type)),
        }
    }
}

impl std::fmt::Display for Array {
    /// numpy's str: `[0. 1. 2.]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Repr::Tracer(t) => write!(f, "Traced<{}>", t.var.aval.long()),
            Repr::Device(d) => match d.wait() {
                Ok(b) => f.write_str(&crate::display::array_str_of(&b)),
                Err(e) => write!(f, "<{e}>"),
            },
        }
    }
}
