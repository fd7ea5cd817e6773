//! Element types (`DType`) and host scalars (`Scalar`).
//!
//! Names follow JAX/numpy: the long name (`float32`) is used by `typeof` and array
//! reprs, the short name (`f32`) by jaxpr text. `jax_enable_x64` is off by default, as in
//! JAX, so Rust `f64`/`i64` literals become weakly typed `f32`/`i32` values.

use std::fmt;

/// The element type of an array.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    Bool,
    I8,
    I16,
    I32,
    I64,
    U8,
    U32,
    BF16,
    F16,
    F32,
    F64,
}

impl DType {
    /// Size of one element in bytes (`Bool` is stored as one byte).
    pub fn size_bytes(self) -> usize {
        match self {
            DType::Bool | DType::I8 | DType::U8 => 1,
            DType::I16 | DType::BF16 | DType::F16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    /// The short name used in jaxpr text: `f32`, `i32`, `bool`, ...
    pub fn short_name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::U32 => "u32",
            DType::BF16 => "bf16",
            DType::F16 => "f16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    /// The numpy name used in reprs and `typeof`: `float32`, `int32`, `bool`, ...
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::U8 => "uint8",
            DType::U32 => "uint32",
            DType::BF16 => "bfloat16",
            DType::F16 => "float16",
            DType::F32 => "float32",
            DType::F64 => "float64",
        }
    }

    /// The MLIR element type: `f32`, `i32`, `i1`, `bf16`, ... (integers are signless in MLIR;
    /// signedness is carried by the ops chosen in lowering).
    pub fn mlir(self) -> &'static str {
        match self {
            DType::Bool => "i1",
            DType::I8 | DType::U8 => "i8",
            DType::I16 => "i16",
            DType::I32 | DType::U32 => "i32",
            DType::I64 => "i64",
            DType::BF16 => "bf16",
            DType::F16 => "f16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::BF16 | DType::F16 | DType::F32 | DType::F64)
    }
    pub fn is_int(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64 | DType::U8 | DType::U32)
    }
    pub fn is_unsigned(self) -> bool {
        matches!(self, DType::U8 | DType::U32)
    }
    pub fn is_bool(self) -> bool {
        self == DType::Bool
    }

    /// Parses a numpy or short name (`"float32"`, `"f32"`, `"int32"`, `"bool"`).
    pub fn parse(s: &str) -> Option<DType> {
        [
            DType::Bool,
            DType::I8,
            DType::I16,
            DType::I32,
            DType::I64,
            DType::U8,
            DType::U32,
            DType::BF16,
            DType::F16,
            DType::F32,
            DType::F64,
        ]
        .into_iter()
        .find(|d| d.name() == s || d.short_name() == s)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One host value of some dtype: the payload of jaxpr literals and of `full`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    Bool(bool),
    I32(i32),
    I64(i64),
    F32(f32),
    F64(f64),
}

impl Scalar {
    /// Converts to `dtype` with numpy's cast semantics (float to int truncates toward zero).
    pub fn cast(self, dtype: DType) -> Scalar {
        let f = self.as_f64();
        match dtype {
            DType::Bool => Scalar::Bool(f != 0.0),
            DType::I8 | DType::I16 | DType::I32 | DType::U8 | DType::U32 => Scalar::I32(match self {
                Scalar::I64(v) => v as i32,
                Scalar::I32(v) => v,
                _ => f as i32,
            }),
            DType::I64 => Scalar::I64(match self {
                Scalar::I64(v) => v,
                Scalar::I32(v) => v as i64,
                _ => f as i64,
            }),
            DType::F64 => Scalar::F64(f),
            DType::BF16 | DType::F16 | DType::F32 => Scalar::F32(f as f32),
        }
    }

    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => b as i32 as f64,
            Scalar::I32(v) => v as f64,
            Scalar::I64(v) => v as f64,
            Scalar::F32(v) => v as f64,
            Scalar::F64(v) => v,
        }
    }

    pub fn as_i64(self) -> i64 {
        match self {
            Scalar::Bool(b) => b as i64,
            Scalar::I32(v) => v as i64,
            Scalar::I64(v) => v,
            Scalar::F32(v) => v as i64,
            Scalar::F64(v) => v as i64,
        }
    }

    /// Little-endian bytes of this value stored as `dtype` (`dtype.size_bytes()` long).
    pub fn to_bytes(self, dtype: DType) -> Vec<u8> {
        match dtype {
            DType::Bool => vec![(self.as_f64() != 0.0) as u8],
            DType::I8 => vec![self.as_i64() as i8 as u8],
            DType::U8 => vec![self.as_i64() as u8],
            DType::I16 => (self.as_i64() as i16).to_le_bytes().to_vec(),
            DType::I32 => (self.as_i64() as i32).to_le_bytes().to_vec(),
            DType::U32 => (self.as_i64() as u32).to_le_bytes().to_vec(),
            DType::I64 => self.as_i64().to_le_bytes().to_vec(),
            DType::F32 => (self.as_f64() as f32).to_le_bytes().to_vec(),
            DType::F64 => self.as_f64().to_le_bytes().to_vec(),
            DType::F16 | DType::BF16 => {
                let bits = (self.as_f64() as f32).to_bits();
                // bf16: keep the top 16 bits with round-to-nearest-even; f16 via the same
                // path is wrong, so f16 rounds through `f16_bits`.
                let h = if dtype == DType::BF16 {
                    let round = 0x7fff + ((bits >> 16) & 1);
                    ((bits.wrapping_add(round)) >> 16) as u16
                } else {
                    f16_bits(self.as_f64() as f32)
                };
                h.to_le_bytes().to_vec()
            }
        }
    }

    /// The text of this value in jaxpr literals: `2`, `1.0`, `True` (floats print their
    /// shortest f64 round-trip form, as JAX does: `1.6699999570846558` for `1.67f32`).
    pub fn jaxpr_text(self) -> String {
        match self {
            Scalar::Bool(b) => if b { "True".into() } else { "False".into() },
            Scalar::I32(v) => v.to_string(),
            Scalar::I64(v) => v.to_string(),
            Scalar::F32(v) => float_text(v as f64),
            Scalar::F64(v) => float_text(v),
        }
    }
}

fn float_text(v: f64) -> String {
    if v.is_nan() {
        "nan".into()
    } else if v.is_infinite() {
        if v > 0.0 { "inf".into() } else { "-inf".into() }
    } else if v == v.trunc() && v.abs() < 1e16 {
        format!("{v:.1}")
    } else {
        format!("{v}")
    }
}

/// IEEE half-precision bits of `v` (round to nearest even).
pub fn f16_bits(v: f32) -> u16 {
    let x = v.to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let exp = ((x >> 23) & 0xff) as i32;
    let mant = x & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if mant != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = mant | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = 1 << (shift - 1);
        let mut r = (m >> shift) as u16;
        let rem = m & ((1 << shift) - 1);
        if rem > half || (rem == half && (r & 1) == 1) {
            r += 1;
        }
        return sign | r;
    }
    let mut r = ((e as u32) << 10 | (mant >> 13)) as u16;
    let rem = mant & 0x1fff;
    if rem > 0x1000 || (rem == 0x1000 && (r & 1) == 1) {
        r += 1;
    }
    sign | r
}
