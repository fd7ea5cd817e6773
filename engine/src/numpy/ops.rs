//! Operators (`x + y`, `x * 2.0`, `-x`) and methods (`x.sin()`, `x.sum()`) on `Array`.
//!
//! Operators cannot return `Result`. Inside a trace an error is recorded with the
//! user's line and comes back from `call`/`trace` as `Err`; in eager code the operator
//! panics with the same message (the session catches it and keeps its variables). The
//! `jnp::` functions return `Result` for code that handles errors itself.
//!
//! Rust scalars on either side are weakly typed literals. Only `f64` and `i32` have
//! operator impls: a single float and a single integer impl let rustc infer the type of
//! `x * 2.0` and `2 * x` at once (with two of each the result type stays unknown).

use crate::error::{Error, Result};
use crate::ir::{DType, Primitive, Scalar, ShapedArray};
use crate::lax::{self, literal};
use crate::numpy as jnp;
use crate::trace::{record_error, Array, Operand};
use std::ops::{Add, Div, Mul, Neg, Sub};

/// Turns an operator's error into a recorded trace error (returning a placeholder of
/// `aval`) or, outside a trace, a panic carrying the message. The error gets the caller's
/// line when it has none (argument checks before `bind`, such as an axis out of range).
#[track_caller]
pub fn fail(e: Error, aval: ShapedArray) -> Array {
    let e = e.here();
    match record_error(e.clone(), aval) {
        Some(a) => a,
        None => panic!("{e}"),
    }
}

#[track_caller]
fn ok_or_fail(r: Result<Array>, like: &Array) -> Array {
    match r {
        Ok(a) => a,
        Err(e) => fail(e, like.aval()),
    }
}

macro_rules! binop {
    ($tr:ident, $m:ident, $p:ident) => {
        impl $tr<Array> for Array {
            type Output = Array;
            #[track_caller]
            fn $m(self, rhs: Array) -> Array {
                ok_or_fail(lax::binary(Primitive::$p, Operand::Array(self.clone()), Operand::Array(rhs)), &self)
            }
        }
        impl $tr<&Array> for Array {
            type Output = Array;
            #[track_caller]
            fn $m(self, rhs: &Array) -> Array {
                ok_or_fail(lax::binary(Primitive::$p, Operand::Array(self.clone()), Operand::Array(rhs.clone())), &self)
            }
        }
        impl $tr<Array> for &Array {
            type Output = Array;
            #[track_caller]
            fn $m(self, rhs: Array) -> Array {
                ok_or_fail(lax::binary(Primitive::$p, Operand::Array(self.clone()), Operand::Array(rhs)), self)
            }
        }
        impl $tr<&Array> for &Array {
            type Output = Array;
            #[track_caller]
            fn $m(self, rhs: &Array) -> Array {
                ok_or_fail(lax::binary(Primitive::$p, Operand::Array(self.clone()), Operand::Array(rhs.clone())), self)
            }
        }
        binop!(@scalars $tr, $m, $p, f64 => F64, i32 => I32);
    };
    (@scalars $tr:ident, $m:ident, $p:ident, $($t:ty => $s:ident),+) => {$(
        impl $tr<$t> for Array {
            type Output = Array;
            #[track_caller]
            fn $m(self, rhs: $t) -> Array {
                ok_or_fail(lax::binary(Primitive::$p, Operand::Array(self.clone()), literal(Scalar::$s(rhs))), &self)
            }
        }
        impl $tr<$t> for &Array {
            type Output = Array;
            #[track_caller]
            fn $m(self, rhs: $t) -> Array {
                ok_or_fail(lax::binary(Primitive::$p, Operand::Array(self.clone()), literal(Scalar::$s(rhs))), self)
            }
        }
        impl $tr<Array> for $t {
            type Output = Array;
            #[track_caller]
            fn $m(self, rhs: Array) -> Array {
                ok_or_fail(lax::binary(Primitive::$p, literal(Scalar::$s(self)), Operand::Array(rhs.clone())), &rhs)
            }
        }
        impl $tr<&Array> for $t {
            type Output = Array;
            #[track_caller]
            fn $m(self, rhs: &Array) -> Array {
                ok_or_fail(lax::binary(Primitive::$p, literal(Scalar::$s(self)), Operand::Array(rhs.clone())), rhs)
            }
        }
    )+};
}
binop!(Add, add, Add);
binop!(Sub, sub, Sub);
binop!(Mul, mul, Mul);
binop!(Div, div, Div);

impl Neg for Array {
    type Output = Array;
    #[track_caller]
    fn neg(self) -> Array {
        ok_or_fail(lax::unary(Primitive::Neg, &self), &self)
    }
}
impl Neg for &Array {
    type Output = Array;
    #[track_caller]
    fn neg(self) -> Array {
        ok_or_fail(lax::unary(Primitive::Neg, self), self)
    }
}

/// Right-hand sides accepted by comparison and `pow` methods: arrays and Rust scalars.
pub trait Rhs {
    fn operand(self) -> Operand;
}
impl Rhs for &Array {
    fn operand(self) -> Operand {
        Operand::Array(self.clone())
    }
}
impl Rhs for Array {
    fn operand(self) -> Operand {
        Operand::Array(self)
    }
}
macro_rules! rhs_scalar {
    ($($t:ty => $s:ident),+) => {$(
        impl Rhs for $t {
            fn operand(self) -> Operand {
                literal(Scalar::$s(self))
            }
        }
    )+};
}
rhs_scalar!(f64 => F64, f32 => F32, i32 => I32, i64 => I64, bool => Bool);

macro_rules! unary_methods {
    ($($name:ident => $p:ident),+) => {$(
        #[doc = concat!("Elementwise `", stringify!($name), "` (see `jnp::", stringify!($name), "`).")]
        #[track_caller]
        pub fn $name(&self) -> Array {
            ok_or_fail(lax::unary(Primitive::$p, self), self)
        }
    )+};
}
macro_rules! cmp_methods {
    ($($name:ident => $p:ident),+) => {$(
        #[doc = concat!("Elementwise comparison `", stringify!($name), "` with broadcasting; bool result.")]
        #[track_caller]
        pub fn $name(&self, rhs: impl Rhs) -> Array {
            ok_or_fail(lax::binary(Primitive::$p, Operand::Array(self.clone()), rhs.operand()), self)
        }
    )+};
}

impl Array {
    unary_methods!(sin => Sin, cos => Cos, tan => Tan, exp => Exp, log => Log, tanh => Tanh, sqrt => Sqrt, abs => Abs);
    cmp_methods!(lt => Lt, le => Le, gt => Gt, ge => Ge, eq => Eq, ne => Ne, maximum => Max, minimum => Min);

    /// Elementwise power `x ** y`; a Rust integer `y` binds `integer_pow[y=..]`.
    #[track_caller]
    pub fn pow(&self, rhs: impl Rhs) -> Array {
        // An integer exponent is `integer_pow[y=..]`, as JAX traces `x ** 2`.
        match rhs.operand() {
            Operand::Lit(v, a) if a.dtype.is_int() && v.as_i64().unsigned_abs() <= i32::MAX as u64 => {
                ok_or_fail(lax::integer_pow(self, v.as_i64() as i32), self)
            }
            o => ok_or_fail(lax::binary(Primitive::Pow, Operand::Array(self.clone()), o), self),
        }
    }
    /// Sum of all elements (0-d result).
    #[track_caller]
    pub fn sum(&self) -> Array {
        ok_or_fail(jnp::sum(self, None), self)
    }
    /// Sum over `axes` (negative axes count from the end).
    #[track_caller]
    pub fn sum_axes(&self, axes: &[isize]) -> Array {
        ok_or_fail(jnp::sum(self, Some(axes)), self)
    }
    /// Mean of all elements.
    #[track_caller]
    pub fn mean(&self) -> Array {
        ok_or_fail(jnp::mean(self, None), self)
    }
    /// Largest element.
    #[track_caller]
    pub fn max(&self) -> Array {
        ok_or_fail(jnp::max(self, None), self)
    }
    /// Smallest element.
    #[track_caller]
    pub fn min(&self) -> Array {
        ok_or_fail(jnp::min(self, None), self)
    }
    /// Reshape (one entry may be -1).
    #[track_caller]
    pub fn reshape(&self, shape: &[isize]) -> Array {
        ok_or_fail(jnp::reshape(self, shape), self)
    }
    /// Reverse the dimensions (`x.T`).
    #[track_caller]
    pub fn t(&self) -> Array {
        ok_or_fail(jnp::transpose(self, None), self)
    }
    /// Matrix product `self @ rhs`.
    #[track_caller]
    pub fn matmul(&self, rhs: &Array) -> Array {
        ok_or_fail(jnp::matmul(self, rhs), self)
    }
    /// Matrix product (alias of `matmul`).
    #[track_caller]
    pub fn dot(&self, rhs: &Array) -> Array {
        ok_or_fail(jnp::matmul(self, rhs), self)
    }
    /// `x.astype(dtype)`: cast to `dtype` (a 64-bit `dtype` becomes 32-bit with JAX's
    /// `UserWarning ... requested in astype ...` while `jax_enable_x64` is off).
    #[track_caller]
    pub fn astype(&self, dtype: DType) -> Array {
        let dtype = lax::promotion::check_user_dtype_supported(dtype, "astype");
        ok_or_fail(lax::convert_element_type_unchecked(self, dtype), self)
    }
}
