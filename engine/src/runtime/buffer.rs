//! Host buffers: 64-byte aligned, dense row-major array data with its type.
//!
//! A `Buffer` is immutable once made (compiled code writes only into fresh outputs), so
//! it is shared through `Arc` by every array and jaxpr constant that refers to it.

use crate::ir::{DType, ShapedArray};
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::fmt;

/// Alignment of every buffer in bytes (one cache line; also enough for AVX-512 loads).
pub const BUFFER_ALIGN: usize = 64;

/// Dense row-major array data of one `ShapedArray` (the weak flag is not stored here).
pub struct Buffer {
    aval: ShapedArray,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the allocation is owned uniquely by the Buffer, and it is only written through
// `&mut self` or by compiled code before the Buffer is shared.
unsafe impl Send for Buffer {}
unsafe impl Sync for Buffer {}

impl Buffer {
    /// A zero-filled buffer of `aval` (`aval.nbytes()` bytes).
    pub fn zeros(aval: &ShapedArray) -> Buffer {
        let len = aval.nbytes();
        let ptr = if len == 0 {
            BUFFER_ALIGN as *mut u8 // dangling, aligned, never dereferenced
        } else {
            // SAFETY: non-zero size, valid power-of-two alignment.
            let p = unsafe { alloc_zeroed(Layout::from_size_align(len, BUFFER_ALIGN).expect("layout")) };
            if p.is_null() {
                std::alloc::handle_alloc_error(Layout::from_size_align(len, BUFFER_ALIGN).unwrap());
            }
            p
        };
        Buffer { aval: aval.strong(), ptr, len }
    }

    /// A buffer holding `bytes` (little-endian elements of `aval.dtype`).
    /// Errors if the length does not match `aval.nbytes()`.
    pub fn from_bytes(aval: &ShapedArray, bytes: &[u8]) -> Result<Buffer, String> {
        if bytes.len() != aval.nbytes() {
            return Err(format!("{} needs {} bytes, got {}", aval.short(), aval.nbytes(), bytes.len()));
        }
        let mut b = Buffer::zeros(aval);
        b.bytes_mut().copy_from_slice(bytes);
        Ok(b)
    }

    /// A buffer from typed host values (`T` must match `aval.dtype`'s size).
    pub fn from_slice<T: Copy>(aval: &ShapedArray, data: &[T]) -> Result<Buffer, String> {
        if std::mem::size_of::<T>() != aval.dtype.size_bytes() || data.len() != aval.size() {
            return Err(format!(
                "{} needs {} elements of {} bytes, got {} of {}",
                aval.short(),
                aval.size(),
                aval.dtype.size_bytes(),
                data.len(),
                std::mem::size_of::<T>()
            ));
        }
        // SAFETY: plain-old-data reinterpretation of a slice of Copy scalars.
        let bytes = unsafe { std::slice::from_raw_parts(data.as_ptr() as *const u8, std::mem::size_of_val(data)) };
        Buffer::from_bytes(aval, bytes)
    }

    pub fn aval(&self) -> &ShapedArray {
        &self.aval
    }
    pub fn dtype(&self) -> DType {
        self.aval.dtype
    }
    pub fn shape(&self) -> &[usize] {
        &self.aval.shape
    }
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes (or dangling with len 0).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and we hold the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
    /// Raw data pointer, for memref descriptors.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The data viewed as `T` (caller picks the `T` matching the dtype: f32 for F32, ...).
    /// Errors if `T`'s size differs from the dtype's.
    pub fn as_slice<T: Copy>(&self) -> Result<&[T], String> {
        if std::mem::size_of::<T>() != self.aval.dtype.size_bytes() {
            return Err(format!("cannot view {} as a {}-byte type", self.aval.short(), std::mem::size_of::<T>()));
        }
        // SAFETY: aligned to 64, length is a multiple of size_of::<T>().
        Ok(unsafe { std::slice::from_raw_parts(self.ptr as *const T, self.aval.size()) })
    }

    /// All elements converted to f64 (bools as 0/1): for tests and reference checks.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        let b = self.bytes();
        let n = self.aval.size();
        (0..n)
            .map(|i| match self.aval.dtype {
                DType::Bool => b[i] as f64,
                DType::I8 => b[i] as i8 as f64,
                DType::U8 => b[i] as f64,
                DType::I16 => i16::from_le_bytes([b[2 * i], b[2 * i + 1]]) as f64,
                DType::I32 => i32::from_le_bytes(b[4 * i..4 * i + 4].try_into().unwrap()) as f64,
                DType::U32 => u32::from_le_bytes(b[4 * i..4 * i + 4].try_into().unwrap()) as f64,
                DType::I64 => i64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap()) as f64,
                DType::F32 => f32::from_le_bytes(b[4 * i..4 * i + 4].try_into().unwrap()) as f64,
                DType::F64 => f64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap()),
                DType::BF16 => f32::from_bits((u16::from_le_bytes([b[2 * i], b[2 * i + 1]]) as u32) << 16) as f64,
                DType::F16 => f16_to_f32(u16::from_le_bytes([b[2 * i], b[2 * i + 1]])) as f64,
            })
            .collect()
    }
}

/// Converts IEEE half bits to f32.
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h >> 15) as u32) << 31;
    let exp = ((h >> 10) & 0x1f) as u32;
    let mant = (h & 0x3ff) as u32;
    let bits = if exp == 0 {
        if mant == 0 {
            sign
        } else {
            let v = mant as f32 * 2f32.powi(-24);
            return if sign != 0 { -v } else { v };
        }
    } else if exp == 0x1f {
        sign | 0x7f80_0000 | (mant << 13)
    } else {
        sign | ((exp + 127 - 15) << 23) | (mant << 13)
    };
    f32::from_bits(bits)
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if self.len != 0 {
            // SAFETY: allocated in `zeros` with this exact layout.
            unsafe { dealloc(self.ptr, Layout::from_size_align(self.len, BUFFER_ALIGN).unwrap()) }
        }
    }
}

impl Clone for Buffer {
    fn clone(&self) -> Buffer {
        let mut b = Buffer::zeros(&self.aval);
        b.bytes_mut().copy_from_slice(self.bytes());
        b
    }
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Buffer({}, {} bytes)", self.aval.short(), self.len)
    }
}
