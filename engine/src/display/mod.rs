//! Display model: plain text and MIME data for arrays, jaxprs and stage outputs.
//! Invariant: nothing here knows about terminals or Jupyter; front ends render it.

pub mod html;
pub mod repr;
pub mod sharding_view;

use crate::ir::DType;
use crate::runtime::Buffer;
use repr::ReprData;

fn with_data<T>(b: &Buffer, f: impl FnOnce(ReprData<'_>) -> T) -> T {
    let vals = b.to_f64_vec();
    match b.dtype() {
        DType::F32 => f(ReprData::F32(b.as_slice::<f32>().expect("f32"))),
        DType::F64 => f(ReprData::F64(b.as_slice::<f64>().expect("f64"))),
        DType::I32 => f(ReprData::I32(b.as_slice::<i32>().expect("i32"))),
        DType::I64 => f(ReprData::I64(b.as_slice::<i64>().expect("i64"))),
        DType::I8 => f(ReprData::I8(b.as_slice::<i8>().expect("i8"))),
        DType::I16 => f(ReprData::I16(b.as_slice::<i16>().expect("i16"))),
        DType::U8 => f(ReprData::U8(b.as_slice::<u8>().expect("u8"))),
        DType::U32 => f(ReprData::U32(b.as_slice::<u32>().expect("u32"))),
        DType::Bool => {
            let v: Vec<bool> = vals.iter().map(|&x| x != 0.0).collect();
            f(ReprData::Bool(&v))
        }
        DType::F16 => {
            let v: Vec<f32> = vals.iter().map(|&x| x as f32).collect();
            f(ReprData::F16(&v))
        }
        DType::BF16 => {
            let v: Vec<f32> = vals.iter().map(|&x| x as f32).collect();
            f(ReprData::BF16(&v))
        }
    }
}

/// JAX's `repr` of an array held in `b`: `Array([0., 1.], dtype=float32)`.
pub fn array_repr_of(b: &Buffer, weak_type: bool) -> String {
    with_data(b, |d| repr::array_repr(d, b.shape(), weak_type))
}

/// numpy's `str` of an array held in `b`: `[0. 1.]`.
pub fn array_str_of(b: &Buffer) -> String {
    with_data(b, |d| repr::array_str(d, b.shape()))
}

/// The HTML table view of an array held in `b` (see [`html::array_html`]).
pub fn array_html_of(b: &Buffer, weak_type: bool) -> String {
    with_data(b, |d| html::array_html(d, b.shape(), weak_type))
}

/// Escapes text for HTML.
pub fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}
