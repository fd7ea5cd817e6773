//! `jax.random`: counter-based pseudo-random numbers from explicit keys, bit for bit
//! the values JAX 0.10 gives for the same key (threefry2x32 with
//! `jax_threefry_partitionable`, JAX's default). See
//! <https://docs.jax.dev/en/latest/jax.random.html> and, for the algorithm, JAX's
//! `jax/_src/prng.py` (threefry) and `jax/_src/random.py` (the distributions).
//!
//! ```ignore
//! let key = random::key(0);
//! let [k1, k2] = random::split(&key, 2)?.unstack2()?;
//! let x = random::uniform(&k1, &[3], DType::F32, 0.0, 1.0)?;   // [0.947667, 0.9785799, 0.33229148]
//! let n = random::normal(&k2, &[2, 3], DType::F32)?;
//! ```
//!
//! Every generator is written with engine primitives (u32 `add`, `xor`, `or`,
//! `shift_left`, `shift_right_logical`, `bitcast_convert_type`, ...), so it runs eagerly,
//! under `jit` and under `vmap` (a batch of keys is a `Key` with a leading dimension).
//! Values equal JAX's exactly for `key`, `split`, `fold_in`, `bits`, `uniform`,
//! `bernoulli`, `randint` and `permutation`; `normal`, `truncated_normal` and
//! `categorical` go through `erf_inv`/`log`/`erf`, whose float32 results can differ from
//! XLA's in the last bit (tests/tests/random.rs checks them to 2 ulp).

mod threefry;

pub use threefry::threefry2x32;

use crate::error::{Error, Result};
use crate::ir::{DType, Primitive, Scalar, ShapedArray};
use crate::lax;
use crate::trace::array::canonicalize_dtype;
use crate::trace::pytree::{Args, CustomNode, Flat, Pytree, TreeDef};
use crate::trace::{Array, Operand};

/// A typed PRNG key, or an array of them (JAX's `key<fry>` arrays): two `uint32` words
/// per key, held as two arrays of the key array's shape so that keys batch under `vmap`
/// and pass through `jit` as a pytree (two leaves).
#[derive(Clone)]
pub struct Key {
    k1: Array,
    k2: Array,
}

impl Key {
    /// The shape of the key array (`[]` for one key).
    pub fn shape(&self) -> Vec<usize> {
        self.k1.shape()
    }
    /// Number of dimensions of the key array.
    pub fn ndim(&self) -> usize {
        self.k1.ndim()
    }
    /// The two 32-bit words (each of the key array's shape).
    pub fn words(&self) -> (&Array, &Array) {
        (&self.k1, &self.k2)
    }
    /// Builds keys from their two words (u32 arrays of one shape).
    /// Errors: other dtypes or unequal shapes (`TypeError`).
    pub fn from_words(k1: Array, k2: Array) -> Result<Key> {
        if k1.dtype() != DType::U32 || k2.dtype() != DType::U32 || k1.shape() != k2.shape() {
            return Err(Error::type_error(format!(
                "key words must be two uint32 arrays of one shape, got {} and {}",
                k1.aval().short(),
                k2.aval().short()
            )));
        }
        Ok(Key { k1, k2 })
    }
    /// Key `i` along the first dimension (`keys[i]`). Errors for a 0-d key or `i` out of range.
    #[track_caller]
    pub fn get(&self, i: usize) -> Result<Key> {
        let s = self.shape();
        if s.is_empty() || i >= s[0] {
            return Err(Error::value_error(format!("index {i} is out of bounds for a key array of shape {}", lax::py_shape(&s))));
        }
        let pick = |w: &Array| -> Result<Array> {
            let mut start = vec![0; s.len()];
            start[0] = i;
            let mut limit = s.clone();
            limit[0] = i + 1;
            let one = lax::slice(w, &start, &limit, None)?;
            lax::reshape(&one, &s[1..])
        };
        Ok(Key { k1: pick(&self.k1)?, k2: pick(&self.k2)? })
    }
    /// The keys along the first dimension, as a `Vec`.
    #[track_caller]
    pub fn unstack(&self) -> Result<Vec<Key>> {
        let n = self.shape().first().copied().unwrap_or(0);
        (0..n).map(|i| self.get(i)).collect()
    }
    /// The two keys of a key array of shape `[2, ...]` (`let [a, b] = split(&k, 2)?.unstack2()?`).
    #[track_caller]
    pub fn unstack2(&self) -> Result<[Key; 2]> {
        if self.shape().first() != Some(&2) {
            return Err(Error::value_error(format!("unstack2 needs a key array of shape (2, ...), got {}", lax::py_shape(&self.shape()))));
        }
        Ok([self.get(0)?, self.get(1)?])
    }
}

impl std::fmt::Debug for Key {
    /// JAX's repr: `Array((), dtype=key<fry>) overlaying:\n[0 0]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shape = lax::py_shape(&self.shape());
        match key_data(self) {
            Ok(d) if !d.is_tracer() => write!(f, "Array({shape}, dtype=key<fry>) overlaying:\n{d}"),
            _ => write!(f, "Traced<key<fry>[{}]>", self.shape().iter().map(|d| d.to_string()).collect::<Vec<_>>().join(",")),
        }
    }
}

impl Pytree for Key {
    fn flatten(&self, flat: &mut Flat) {
        let c1 = flat.child(&self.k1);
        let c2 = flat.child(&self.k2);
        flat.treedef = TreeDef::Custom(Box::new(CustomNode {
            type_name: std::any::type_name::<Key>(),
            fields: vec!["k1", "k2"],
            statics: vec![],
            children: vec![c1, c2],
        }));
    }
    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Array>) -> Result<Self> {
        let n = crate::trace::pytree::custom_node(def, std::any::type_name::<Key>(), 2, 0)?;
        let k1 = Array::unflatten(&n.children[0], leaves)?;
        let k2 = Array::unflatten(&n.children[1], leaves)?;
        Ok(Key { k1, k2 })
    }
}

impl Args<Key> for Key {
    fn flatten_args(self, flat: &mut Flat) {
        self.flatten(flat)
    }
}
impl Args<Key> for &Key {
    fn flatten_args(self, flat: &mut Flat) {
        self.flatten(flat)
    }
}

pub(crate) fn u32_lit(v: u32) -> Operand {
    Operand::Lit(Scalar::I32(v as i32), ShapedArray::new(&[], DType::U32))
}

fn lit(v: f64, d: DType) -> Operand {
    Operand::Lit(Scalar::F64(v).cast(d), ShapedArray::new(&[], d))
}

fn arr(a: &Array) -> Operand {
    Operand::Array(a.clone())
}

#[track_caller]
fn bin(p: Primitive, a: &Array, b: Operand) -> Result<Array> {
    lax::binary(p, arr(a), b)
}

fn single(name: &str, key: &Key) -> Result<()> {
    if key.ndim() != 0 {
        return Err(Error::type_error(format!(
            "{name} accepts a single key, but was given a key array of shape {} != (). Use jax.vmap for batching.",
            lax::py_shape(&key.shape())
        )));
    }
    Ok(())
}

/// The key words of a seed given on the host (JAX's `threefry_seed`): with
/// `jax_enable_x64` off the seed is an int32, so the high word is 0 and the low word is
/// its bits; with x64 on, the high and low 32 bits of the int64.
/// Errors: a seed outside int32 with x64 off (`ValueError`; JAX's is an `OverflowError`).
fn seed_words(seed: i64) -> Result<(u32, u32)> {
    if crate::config::enable_x64() {
        return Ok(((seed as u64 >> 32) as u32, seed as u32));
    }
    if seed < i32::MIN as i64 || seed > i32::MAX as i64 {
        // JAX raises OverflowError here; the engine has no such kind, so ValueError.
        return Err(Error::value_error(format!("Python int {seed} too large to convert to int32")));
    }
    Ok((0, seed as i32 as u32))
}

/// `jax.random.key(seed)`: a typed key (shape `[]`) from an integer seed.
/// Panics like JAX's `OverflowError` for a seed outside int32 while `jax_enable_x64` is
/// off; `try_key` returns the error instead.
#[track_caller]
pub fn key(seed: i64) -> Key {
    try_key(seed).unwrap_or_else(|e| panic!("{e}"))
}

/// `key` returning its error (a seed outside int32 with `jax_enable_x64` off).
pub fn try_key(seed: i64) -> Result<Key> {
    let (hi, lo) = seed_words(seed)?;
    Ok(Key { k1: Array::scalar(hi), k2: Array::scalar(lo) })
}

/// A key from a traced or concrete integer seed array (0-d, any integer dtype): the
/// high word is the seed's bits above 32 (0 for 32-bit seeds), the low word its low 32 bits.
/// Errors: a non-integer or non-0-d seed (`TypeError`).
#[track_caller]
pub fn key_from(seed: &Array) -> Result<Key> {
    let a = seed.aval();
    if !a.shape.is_empty() {
        return Err(Error::type_error(format!("PRNG key seed must be a scalar; got {}.", a.short())));
    }
    if !a.dtype.is_int() {
        return Err(Error::type_error(format!("PRNG key seed must be an integer; got {}", a.short())));
    }
    let hi_bits = bin(Primitive::ShiftRightLogical, seed, Operand::Lit(Scalar::I32(32), ShapedArray::new(&[], a.dtype)))?;
    let k1 = lax::convert_element_type(&hi_bits, DType::U32)?;
    let k2 = lax::convert_element_type(seed, DType::U32)?;
    Ok(Key { k1, k2 })
}

/// `jax.random.PRNGKey(seed)`: a raw key, `uint32[2]` (high word, low word).
#[track_caller]
pub fn prng_key(seed: i64) -> Result<Array> {
    let (hi, lo) = seed_words(seed)?;
    Ok(Array::from_slice(&[hi, lo]))
}

/// `jax.random.key_data(keys)`: the raw words, `uint32[*shape, 2]`.
#[track_caller]
pub fn key_data(key: &Key) -> Result<Array> {
    let s = key.shape();
    let mut s1 = s.clone();
    s1.push(1);
    let a = lax::reshape(&key.k1, &s1)?;
    let b = lax::reshape(&key.k2, &s1)?;
    lax::concatenate(&[a, b], s.len())
}

/// `jax.random.wrap_key_data(data)`: typed keys from raw words `uint32[*shape, 2]` (a
/// `PRNGKey`-style array). Errors: another dtype or a last dimension other than 2.
#[track_caller]
pub fn wrap_key_data(data: &Array) -> Result<Key> {
    let s = data.shape();
    if data.dtype() != DType::U32 || s.last() != Some(&2) {
        return Err(Error::type_error(format!("wrap_key_data needs uint32[..., 2] key data, got {}", data.aval().short())));
    }
    let n = s.len() - 1;
    let word = |i: usize| -> Result<Array> {
        let mut start = vec![0; s.len()];
        start[n] = i;
        let mut limit = s.clone();
        limit[n] = i + 1;
        lax::reshape(&lax::slice(data, &start, &limit, None)?, &s[..n])
    };
    Ok(Key { k1: word(0)?, k2: word(1)? })
}

/// The row-major index of each element of `shape`, as `uint32` (the low word of JAX's
/// `iota_2x32_shape`; the high word is 0 below 2^32 elements).
#[track_caller]
fn counter(shape: &[usize]) -> Result<Array> {
    let n: usize = shape.iter().product();
    if n as u64 > u32::MAX as u64 {
        return Err(Error::value_error("random bits for more than 2^32 elements are not supported"));
    }
    let i = lax::iota(DType::U32, &[n], 0)?;
    lax::reshape(&i, shape)
}

/// `jax.random.split(key, num)`: `num` new keys (a key array of shape `[num]`), each
/// threefry2x32 of the key on the counter `(0, i)`. Errors: a key array that is not a
/// single key (use `vmap`).
#[track_caller]
pub fn split(key: &Key, num: usize) -> Result<Key> {
    single("split", key)?;
    let (y1, y2) = threefry2x32(&key.k1, &key.k2, u32_lit(0), arr(&counter(&[num])?))?;
    Ok(Key { k1: y1, k2: y2 })
}

/// `jax.random.fold_in(key, data)`: a new key mixing in the 32-bit integer `data`
/// (threefry2x32 of the key on `(0, data as u32)`; equal to `split(key, n)[data]`).
#[track_caller]
pub fn fold_in(key: &Key, data: i64) -> Result<Key> {
    single("fold_in", key)?;
    let (y1, y2) = threefry2x32(&key.k1, &key.k2, u32_lit(0), u32_lit(data as u32))?;
    Ok(Key { k1: y1, k2: y2 })
}

/// `fold_in` with traced data (a 0-d integer array, taken modulo 2^32).
#[track_caller]
pub fn fold_in_array(key: &Key, data: &Array) -> Result<Key> {
    single("fold_in", key)?;
    if !data.shape().is_empty() || !data.dtype().is_int() {
        return Err(Error::type_error(format!("fold_in data must be a 0-d integer, got {}", data.aval().short())));
    }
    let d = lax::convert_element_type(data, DType::U32)?;
    let (y1, y2) = threefry2x32(&key.k1, &key.k2, u32_lit(0), arr(&d))?;
    Ok(Key { k1: y1, k2: y2 })
}

/// The two threefry output words for every element of `shape`.
#[track_caller]
fn words(key: &Key, shape: &[usize]) -> Result<(Array, Array)> {
    threefry2x32(&key.k1, &key.k2, u32_lit(0), arr(&counter(shape)?))
}

/// `jax.random.bits(key, shape, uint32)`: 32 random bits per element (the xor of the two
/// threefry words of the element's index).
#[track_caller]
pub fn bits(key: &Key, shape: &[usize]) -> Result<Array> {
    single("bits", key)?;
    let (y1, y2) = words(key, shape)?;
    bin(Primitive::Xor, &y1, arr(&y2))
}

/// Checks an explicitly requested dtype for a random function: warns and truncates
/// 64-bit dtypes while `jax_enable_x64` is off.
#[track_caller]
fn requested(dtype: DType, fun: &str) -> DType {
    crate::lax::promotion::check_user_dtype_supported(dtype, fun)
}

#[track_caller]
fn float_dtype(name: &str, dtype: DType) -> Result<DType> {
    let d = requested(dtype, name);
    if !d.is_float() {
        return Err(Error::type_error(format!("dtype argument to `{name}` must be a float dtype, got {}", d.name())));
    }
    Ok(d)
}

/// Mantissa bits and the bit pattern of 1.0 of a float dtype.
fn float_layout(d: DType) -> (u32, i64) {
    match d {
        DType::BF16 => (7, 0x3f80),
        DType::F16 => (10, 0x3c00),
        DType::F32 => (23, 0x3f80_0000),
        _ => (52, 0x3ff0_0000_0000_0000),
    }
}

/// Floats in [0, 1) from random bits, as JAX does: random mantissa bits under the
/// exponent of 1.0, bitcast, minus 1. Halves use 16 bits (bfloat16: 8, zero-extended),
/// float64 the two words as one 64-bit value (high word first).
#[track_caller]
fn unit_floats(key: &Key, shape: &[usize], d: DType) -> Result<Array> {
    let (y1, y2) = words(key, shape)?;
    let (nmant, one) = float_layout(d);
    let f = if d == DType::F64 {
        let hi = lax::convert_element_type(&y1, DType::I64)?;
        let lo = lax::convert_element_type(&y2, DType::I64)?;
        let i64_lit = |v: i64| Operand::Lit(Scalar::I64(v), ShapedArray::new(&[], DType::I64));
        let b = bin(Primitive::ShiftLeft, &hi, i64_lit(32))?;
        let b = bin(Primitive::Or, &b, arr(&lo))?;
        let m = bin(Primitive::ShiftRightLogical, &b, i64_lit(64 - nmant as i64))?;
        let m = bin(Primitive::Or, &m, i64_lit(one))?;
        lax::bind1(Primitive::BitcastConvertType { new_dtype: d }, vec![arr(&m)])?
    } else {
        let x = bin(Primitive::Xor, &y1, arr(&y2))?;
        let rng_bits: u32 = match d {
            DType::F32 => 32,
            DType::F16 => 16,
            _ => 8, // bfloat16: fewer than 8 mantissa bits, so 8 random bits
        };
        let x = if rng_bits < 32 { bin(Primitive::And, &x, u32_lit(((1u64 << rng_bits) - 1) as u32))? } else { x };
        let m = bin(Primitive::ShiftRightLogical, &x, u32_lit(rng_bits - nmant))?;
        let m = bin(Primitive::Or, &m, u32_lit(one as u32))?;
        let m = if d == DType::F32 { m } else { lax::convert_element_type(&m, DType::I16)? };
        lax::bind1(Primitive::BitcastConvertType { new_dtype: d }, vec![arr(&m)])?
    };
    bin(Primitive::Sub, &f, lit(1.0, d))
}

/// `v` rounded to `d` (host), as the literal JAX would make with `np.array(v, d)`.
fn round_to(v: f64, d: DType) -> f64 {
    let b = Scalar::F64(v).to_bytes(d);
    match d {
        DType::F64 => v,
        DType::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
        DType::BF16 => f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16) as f64,
        _ => crate::runtime::buffer::f16_to_f32(u16::from_le_bytes([b[0], b[1]])) as f64,
    }
}

/// `floats01 * (maxval - minval) + minval`, then at least `minval` (JAX's `_uniform`).
#[track_caller]
fn scale_unit(u: &Array, lo: Operand, span: Operand) -> Result<Array> {
    let x = bin(Primitive::Mul, u, span)?;
    let x = lax::binary(Primitive::Add, Operand::Array(x), lo.clone())?;
    lax::binary(Primitive::Max, lo, Operand::Array(x))
}

/// `jax.random.uniform(key, shape, dtype, minval, maxval)`: floats in [minval, maxval)
/// (JAX's doc page: <https://docs.jax.dev/en/latest/_autosummary/jax.random.uniform.html>).
/// `dtype` is a float dtype (float64 truncates to float32, with JAX's warning, while
/// `jax_enable_x64` is off). Errors: a non-float dtype, a key array that is not a single key.
#[track_caller]
pub fn uniform(key: &Key, shape: &[usize], dtype: DType, minval: f64, maxval: f64) -> Result<Array> {
    single("uniform", key)?;
    let d = float_dtype("uniform", dtype)?;
    let (lo, hi) = (round_to(minval, d), round_to(maxval, d));
    let u = unit_floats(key, shape, d)?;
    scale_unit(&u, lit(lo, d), lit(round_to(hi - lo, d), d))
}

/// `jax.random.normal(key, shape, dtype)`: standard normal samples, as JAX makes them:
/// `√2 · erf_inv(u)` for `u` uniform in (-1, 1).
#[track_caller]
pub fn normal(key: &Key, shape: &[usize], dtype: DType) -> Result<Array> {
    single("normal", key)?;
    let d = float_dtype("normal", dtype)?;
    let lo = next_toward(-1.0, 0.0, d);
    let u = unit_floats(key, shape, d)?;
    let u = scale_unit(&u, lit(lo, d), lit(round_to(1.0 - lo, d), d))?;
    let e = lax::unary(Primitive::ErfInv, &u)?;
    lax::binary(Primitive::Mul, lit(std::f64::consts::SQRT_2, d), Operand::Array(e))
}

/// The float of `d` next to `x` toward `y` (host `nextafter`).
fn next_toward(x: f64, y: f64, d: DType) -> f64 {
    let x = round_to(x, d);
    if x == y || x.is_nan() || y.is_nan() {
        return if x.is_nan() { x } else { y };
    }
    match d {
        DType::F64 => {
            if x == 0.0 {
                return f64::from_bits(1).copysign(y - x);
            }
            let b = x.to_bits();
            f64::from_bits(if (y > x) == (x > 0.0) { b + 1 } else { b - 1 })
        }
        DType::F32 => {
            let x = x as f32;
            if x == 0.0 {
                return f32::from_bits(1).copysign((y - x as f64) as f32) as f64;
            }
            let b = x.to_bits();
            f32::from_bits(if (y > x as f64) == (x > 0.0) { b + 1 } else { b - 1 }) as f64
        }
        _ => {
            // halves: step in 16-bit patterns
            let bytes = Scalar::F64(x).to_bytes(d);
            let h = u16::from_le_bytes([bytes[0], bytes[1]]);
            let n = if x == 0.0 {
                if y > 0.0 { 1 } else { 0x8001 }
            } else if (y > x) == (x > 0.0) {
                h + 1
            } else {
                h - 1
            };
            match d {
                DType::BF16 => f32::from_bits((n as u32) << 16) as f64,
                _ => crate::runtime::buffer::f16_to_f32(n) as f64,
            }
        }
    }
}

/// `jax.random.truncated_normal(key, lower, upper, shape, dtype)`: normal samples
/// conditioned on (lower, upper), as JAX: `√2 · erf_inv(u)` for `u` uniform between
/// `erf(lower/√2)` and `erf(upper/√2)`, clipped into the open interval.
#[track_caller]
pub fn truncated_normal(key: &Key, lower: f64, upper: f64, shape: &[usize], dtype: DType) -> Result<Array> {
    single("truncated_normal", key)?;
    let d = float_dtype("truncated_normal", dtype)?;
    let sqrt2 = std::f64::consts::SQRT_2;
    let bound = |v: f64| -> Result<Array> {
        let x = crate::numpy::full(&[], round_to(v, d), d);
        let x = bin(Primitive::Div, &x, lit(sqrt2, d))?;
        lax::unary_prim(Primitive::Erf, &x)
    };
    let (a, b) = (bound(lower)?, bound(upper)?);
    let span = bin(Primitive::Sub, &b, arr(&a))?;
    let u = unit_floats(key, shape, d)?;
    let u = scale_unit(&u, arr(&a), arr(&span))?;
    let e = lax::unary(Primitive::ErfInv, &u)?;
    let out = lax::binary(Primitive::Mul, lit(sqrt2, d), Operand::Array(e))?;
    let lo = next_toward(lower, f64::INFINITY, d);
    let hi = next_toward(upper, f64::NEG_INFINITY, d);
    let out = bin(Primitive::Max, &out, lit(lo, d))?;
    bin(Primitive::Min, &out, lit(hi, d))
}

/// `jax.random.bernoulli(key, p, shape)`: `uniform(key, shape) < p`, bool.
#[track_caller]
pub fn bernoulli(key: &Key, p: f64, shape: &[usize]) -> Result<Array> {
    single("bernoulli", key)?;
    let d = canonicalize_dtype(DType::F32);
    let u = unit_floats(key, shape, d)?;
    let u = scale_unit(&u, lit(0.0, d), lit(1.0, d))?;
    bin(Primitive::Lt, &u, lit(p, d))
}

/// `jax.random.randint(key, shape, minval, maxval, dtype)`: integers in [minval, maxval)
/// (`minval` when `maxval <= minval`), JAX's algorithm: two words of random bits per
/// element reduced modulo the span. `dtype`: int32, uint32, int8 or uint8 (int64 while
/// `jax_enable_x64` is off becomes int32). Errors: other dtypes.
#[track_caller]
pub fn randint(key: &Key, shape: &[usize], minval: i64, maxval: i64, dtype: DType) -> Result<Array> {
    single("randint", key)?;
    let d = requested(dtype, "randint");
    let (nbits, udt) = match d {
        DType::I32 | DType::U32 => (32u32, DType::U32),
        DType::I8 | DType::U8 => (8, DType::U8),
        _ => return Err(Error::type_error(format!("randint supports int32, uint32, int8 and uint8 here, got {}", d.name()))),
    };
    let (tmin, tmax): (i64, i64) = match d {
        DType::I32 => (i32::MIN as i64, i32::MAX as i64),
        DType::U32 => (0, u32::MAX as i64),
        DType::I8 => (i8::MIN as i64, i8::MAX as i64),
        _ => (0, u8::MAX as i64),
    };
    let out_of_range = maxval > tmax;
    let (lo, hi) = (minval.clamp(tmin, tmax), maxval.clamp(tmin, tmax));
    let modulus = 1u64 << nbits;
    let mut span = ((hi - lo).rem_euclid(modulus as i64)) as u64;
    if hi <= lo {
        span = 1;
    }
    if out_of_range && hi > lo {
        span = (span + 1) % modulus;
    }
    let half = 1u64 << (nbits / 2);
    // 2^nbits mod span, as JAX computes it: the square wraps at nbits bits (so for spans
    // above 2^(nbits/2) it is not the true residue; the values follow JAX, not the math).
    let (mult, spanv) = if span == 0 {
        (0, 0)
    } else {
        let m = half % span;
        ((m * m % modulus) % span, span)
    };
    let ks = split(key, 2)?;
    let rbits = |k: &Key| -> Result<Array> {
        let b = bits(k, shape)?;
        if nbits == 32 { Ok(b) } else { lax::convert_element_type(&b, udt) }
    };
    let higher = rbits(&ks.get(0)?)?;
    let lower = rbits(&ks.get(1)?)?;
    let ulit = |v: u64| Operand::Lit(Scalar::I64(v as i64).cast(udt), ShapedArray::new(&[], udt));
    let a = bin(Primitive::Rem, &higher, ulit(spanv))?;
    let a = bin(Primitive::Mul, &a, ulit(mult))?;
    let b = bin(Primitive::Rem, &lower, ulit(spanv))?;
    let off = bin(Primitive::Add, &a, arr(&b))?;
    let off = bin(Primitive::Rem, &off, ulit(spanv))?;
    let off = lax::convert_element_type(&off, d)?;
    lax::binary(Primitive::Add, Operand::Lit(Scalar::I64(lo).cast(d), ShapedArray::new(&[], d)), Operand::Array(off))
}

/// Sorting rounds JAX's `_shuffle` uses for `n` elements: ceil(3 ln n / ln(2^32 - 1)).
fn shuffle_rounds(n: usize) -> usize {
    (3.0 * (n.max(1) as f64).ln() / (u32::MAX as f64).ln()).ceil() as usize
}

/// `jax.random.permutation(key, n)`: a random permutation of `0..n` (int32).
#[track_caller]
pub fn permutation_n(key: &Key, n: usize) -> Result<Array> {
    let x = lax::iota(canonicalize_dtype(DType::I64), &[n], 0)?;
    permutation(key, &x, 0)
}

/// `jax.random.permutation(key, x, axis)`: `x` with its slices along `axis` shuffled
/// (the same permutation for every slice), by JAX's rounds of sorting on random keys.
/// Errors: a 0-d `x` (use `permutation_n`), `axis` out of range.
#[track_caller]
pub fn permutation(key: &Key, x: &Array, axis: usize) -> Result<Array> {
    single("permutation", key)?;
    let s = x.shape();
    if s.is_empty() {
        return Err(Error::type_error("x must be an integer or at least 1-dimensional (use permutation_n)"));
    }
    if axis >= s.len() {
        return Err(Error::value_error(format!("axis {axis} is out of bounds for array of dimension {}", s.len())));
    }
    let n = s[axis];
    let mut key = key.clone();
    let mut x = x.clone();
    // JAX shuffles `arange(n)` (rounds over its size) and takes; sorting every slice by the
    // same keys is the same permutation.
    let rounds = if s.len() == 1 { shuffle_rounds(x.size()) } else { shuffle_rounds(n) };
    for _ in 0..rounds {
        let [k, sub] = split(&key, 2)?.unstack2()?;
        key = k;
        let sort_keys = bits(&sub, &[n])?;
        let sort_keys = if s.len() == 1 {
            sort_keys
        } else {
            lax::bind1(Primitive::BroadcastInDim { shape: s.clone(), broadcast_dimensions: vec![axis] }, vec![arr(&sort_keys)])?
        };
        let mut out = lax::sort(&[sort_keys, x], axis, 1)?;
        x = out.pop().ok_or_else(|| Error::type_error("sort gave no outputs"))?;
    }
    Ok(x)
}

/// `jax.random.gumbel(key, shape, dtype)`: `-log(-log(u))` for `u` uniform in [tiny, 1).
#[track_caller]
pub fn gumbel(key: &Key, shape: &[usize], dtype: DType) -> Result<Array> {
    single("gumbel", key)?;
    let d = float_dtype("gumbel", dtype)?;
    let tiny = match d {
        DType::F64 => f64::MIN_POSITIVE,
        DType::F32 => f32::MIN_POSITIVE as f64,
        DType::F16 => 6.103_515_625e-5,
        _ => f32::MIN_POSITIVE as f64, // bfloat16 has float32's exponent range
    };
    let u = unit_floats(key, shape, d)?;
    let u = scale_unit(&u, lit(tiny, d), lit(round_to(1.0 - tiny, d), d))?;
    let l = lax::unary(Primitive::Log, &u)?;
    let l = lax::unary(Primitive::Neg, &l)?;
    let l = lax::unary(Primitive::Log, &l)?;
    lax::unary(Primitive::Neg, &l)
}

/// `jax.random.categorical(key, logits, axis, shape)`: samples of the index along `axis`
/// with probabilities `softmax(logits)`, by the Gumbel-max trick as JAX does. `shape`
/// (default: the logits' shape without `axis`) must end with that batch shape.
/// Errors: `axis` out of range, a `shape` that does not end with the batch shape.
#[track_caller]
pub fn categorical(key: &Key, logits: &Array, axis: isize, shape: Option<&[usize]>) -> Result<Array> {
    single("categorical", key)?;
    let ls = logits.shape();
    let nd = ls.len() as isize;
    if nd == 0 || axis < -nd || axis >= nd {
        return Err(Error::value_error(format!("axis {axis} is out of bounds for logits of shape {}", lax::py_shape(&ls))));
    }
    let ax = axis.rem_euclid(nd) as usize;
    let batch: Vec<usize> = ls.iter().enumerate().filter(|&(i, _)| i != ax).map(|(_, &d)| d).collect();
    let shape = shape.map(|s| s.to_vec()).unwrap_or_else(|| batch.clone());
    if shape.len() < batch.len() || shape[shape.len() - batch.len()..] != batch[..] {
        return Err(Error::value_error(format!(
            "categorical: shape {} must end with the logits' batch shape {}",
            lax::py_shape(&shape),
            lax::py_shape(&batch)
        )));
    }
    let prefix = &shape[..shape.len() - batch.len()];
    let mut full = prefix.to_vec();
    let mut lshape = shape[prefix.len()..].to_vec();
    lshape.insert(ax, ls[ax]);
    full.extend(&lshape);
    let d = if logits.dtype().is_float() { logits.dtype() } else { canonicalize_dtype(DType::F64) };
    let g = gumbel(key, &full, d)?;
    let dims: Vec<usize> = (prefix.len()..full.len()).collect();
    let l = lax::bind1(Primitive::BroadcastInDim { shape: full.clone(), broadcast_dimensions: dims }, vec![arr(logits)])?;
    let l = if l.dtype() != d { lax::convert_element_type(&l, d)? } else { l };
    let z = bin(Primitive::Add, &g, arr(&l))?;
    crate::numpy::argmax(&z, Some(axis))
}
