//! Pytrees: nested containers of arrays that transformations flatten to a list of leaves
//! and rebuild. Arguments pass through `Args`, which also accepts references and Rust
//! scalars (weakly typed), shape specs (`ShapeDtypeStruct`) and `Static` values (part of
//! the cache key, not traced: JAX's `static_argnums`).

use super::array::Array;
use crate::error::{Error, Result};
use crate::ir::{Scalar, ShapeDtypeStruct, ShapedArray};
use std::any::Any;
use std::collections::hash_map::DefaultHasher;
use std::fmt::Debug;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// A static (non-traced) argument value: hashed into the cache key and passed to the
/// traced function unchanged (JAX's `static_argnums`). `T` must be hashable, as in JAX.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Static<T>(pub T);

impl<T> std::ops::Deref for Static<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// A static value inside a flattened argument list.
#[derive(Clone)]
pub struct StaticValue {
    /// `Debug` text of the value (shown in cache-miss explanations).
    pub repr: String,
    pub hash: u64,
    pub value: Arc<dyn Any + Send + Sync>,
}

impl PartialEq for StaticValue {
    fn eq(&self, o: &Self) -> bool {
        self.hash == o.hash && self.repr == o.repr
    }
}
impl Eq for StaticValue {}
impl Hash for StaticValue {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.hash.hash(h)
    }
}

/// One argument leaf: a value, or only a type (for `trace`/`lower` with specs).
#[derive(Clone, Debug)]
pub enum ArgLeaf {
    Value(Array),
    Spec(ShapedArray),
}

impl ArgLeaf {
    pub fn aval(&self) -> ShapedArray {
        match self {
            ArgLeaf::Value(a) => a.aval(),
            ArgLeaf::Spec(s) => s.clone(),
        }
    }
}

/// Flattened arguments: leaves, static values and the tree structure text
/// (`(*, *)`, `[*, *]`, `static(3)`).
#[derive(Clone, Default)]
pub struct Flat {
    pub leaves: Vec<ArgLeaf>,
    pub statics: Vec<StaticValue>,
    pub treedef: String,
}

/// A pytree type: can be flattened to array leaves and rebuilt from them.
pub trait Pytree: Clone + 'static {
    /// Appends this value's leaves, statics and structure.
    fn flatten(&self, flat: &mut Flat);
    /// Rebuilds a value of this type from leaves and statics (in `flatten` order).
    fn unflatten(leaves: &mut dyn Iterator<Item = Array>, statics: &mut dyn Iterator<Item = StaticValue>) -> Result<Self>;
}

fn missing() -> Error {
    Error::type_error("pytree structure mismatch: fewer leaves than the structure needs")
}

impl Pytree for Array {
    fn flatten(&self, flat: &mut Flat) {
        flat.leaves.push(ArgLeaf::Value(self.clone()));
        flat.treedef.push('*');
    }
    fn unflatten(leaves: &mut dyn Iterator<Item = Array>, _: &mut dyn Iterator<Item = StaticValue>) -> Result<Self> {
        leaves.next().ok_or_else(missing)
    }
}

impl<T: Clone + Debug + Hash + Eq + Send + Sync + 'static> Pytree for Static<T> {
    fn flatten(&self, flat: &mut Flat) {
        flat.statics.push(static_value(&self.0));
        flat.treedef.push_str(&format!("static({:?})", self.0));
    }
    fn unflatten(_: &mut dyn Iterator<Item = Array>, statics: &mut dyn Iterator<Item = StaticValue>) -> Result<Self> {
        let s = statics.next().ok_or_else(missing)?;
        s.value
            .downcast_ref::<T>()
            .cloned()
            .map(Static)
            .ok_or_else(|| Error::type_error("static argument type changed"))
    }
}

fn static_value<T: Debug + Hash + Send + Sync + Clone + 'static>(v: &T) -> StaticValue {
    let mut h = DefaultHasher::new();
    v.hash(&mut h);
    StaticValue { repr: format!("{v:?}"), hash: h.finish(), value: Arc::new(v.clone()) }
}

impl<T: Pytree> Pytree for Vec<T> {
    fn flatten(&self, flat: &mut Flat) {
        flat.treedef.push('[');
        for (i, x) in self.iter().enumerate() {
            if i > 0 {
                flat.treedef.push_str(", ");
            }
            x.flatten(flat);
        }
        flat.treedef.push(']');
    }
    fn unflatten(_: &mut dyn Iterator<Item = Array>, _: &mut dyn Iterator<Item = StaticValue>) -> Result<Self> {
        Err(Error::type_error(
            "a Vec cannot be rebuilt without its length; the traced function's Vec arguments use unflatten_like",
        ))
    }
}

impl Pytree for () {
    fn flatten(&self, flat: &mut Flat) {
        flat.treedef.push_str("()");
    }
    fn unflatten(_: &mut dyn Iterator<Item = Array>, _: &mut dyn Iterator<Item = StaticValue>) -> Result<Self> {
        Ok(())
    }
}

macro_rules! tuple_pytree {
    ($($t:ident $i:tt),+) => {
        impl<$($t: Pytree),+> Pytree for ($($t,)+) {
            fn flatten(&self, flat: &mut Flat) {
                flat.treedef.push('(');
                $( if $i > 0 { flat.treedef.push_str(", "); } self.$i.flatten(flat); )+
                flat.treedef.push(')');
            }
            fn unflatten(leaves: &mut dyn Iterator<Item = Array>, statics: &mut dyn Iterator<Item = StaticValue>) -> Result<Self> {
                Ok(($($t::unflatten(leaves, statics)?,)+))
            }
        }
    };
}
tuple_pytree!(A 0);
tuple_pytree!(A 0, B 1);
tuple_pytree!(A 0, B 1, C 2);
tuple_pytree!(A 0, B 1, C 2, D 3);
tuple_pytree!(A 0, B 1, C 2, D 3, E 4);
tuple_pytree!(A 0, B 1, C 2, D 3, E 4, F 5);

/// Values accepted where a jitted function's argument of type `A` is expected:
/// `A` itself, `&Array`, Rust scalars (weakly typed 0-d arrays), `ShapeDtypeStruct`
/// specs, and tuples of these.
pub trait Args<A> {
    fn flatten_args(self, flat: &mut Flat);
}

impl Args<Array> for Array {
    fn flatten_args(self, flat: &mut Flat) {
        self.flatten(flat)
    }
}
impl Args<Array> for &Array {
    fn flatten_args(self, flat: &mut Flat) {
        self.flatten(flat)
    }
}
impl Args<Array> for ShapeDtypeStruct {
    fn flatten_args(self, flat: &mut Flat) {
        flat.leaves.push(ArgLeaf::Spec(self.aval()));
        flat.treedef.push('*');
    }
}
impl Args<Array> for &ShapeDtypeStruct {
    fn flatten_args(self, flat: &mut Flat) {
        self.clone().flatten_args(flat)
    }
}
macro_rules! scalar_args {
    ($($t:ty => $s:ident),+) => {$(
        impl Args<Array> for $t {
            fn flatten_args(self, flat: &mut Flat) {
                Array::weak_scalar(Scalar::$s(self as _)).flatten(flat)
            }
        }
    )+};
}
scalar_args!(f32 => F32, f64 => F64, i32 => I32, i64 => I64, bool => Bool);

impl<T: Clone + Debug + Hash + Eq + Send + Sync + 'static> Args<Static<T>> for Static<T> {
    fn flatten_args(self, flat: &mut Flat) {
        self.flatten(flat)
    }
}
impl<T: Clone + Debug + Hash + Eq + Send + Sync + 'static> Args<Static<T>> for &Static<T> {
    fn flatten_args(self, flat: &mut Flat) {
        self.flatten(flat)
    }
}
impl<A: Pytree, X: Args<A>> Args<Vec<A>> for Vec<X> {
    fn flatten_args(self, flat: &mut Flat) {
        flat.treedef.push('[');
        for (i, x) in self.into_iter().enumerate() {
            if i > 0 {
                flat.treedef.push_str(", ");
            }
            x.flatten_args(flat);
        }
        flat.treedef.push(']');
    }
}

macro_rules! tuple_args {
    ($($a:ident $x:ident $i:tt),+) => {
        impl<$($a: Pytree, $x: Args<$a>),+> Args<($($a,)+)> for ($($x,)+) {
            fn flatten_args(self, flat: &mut Flat) {
                flat.treedef.push('(');
                $( if $i > 0 { flat.treedef.push_str(", "); } self.$i.flatten_args(flat); )+
                flat.treedef.push(')');
            }
        }
    };
}
tuple_args!(A X 0);
tuple_args!(A X 0, B Y 1);
tuple_args!(A X 0, B Y 1, C Z 2);
tuple_args!(A X 0, B Y 1, C Z 2, D W 3);
tuple_args!(A X 0, B Y 1, C Z 2, D W 3, E V 4);
tuple_args!(A X 0, B Y 1, C Z 2, D W 3, E V 4, F U 5);

/// Rebuilds an `A` from leaves when the structure text is known: handles `Vec` lengths,
/// which the type alone does not give.
pub fn unflatten_like<A: Pytree>(treedef: &str, leaves: Vec<Array>, statics: Vec<StaticValue>) -> Result<A> {
    let _ = treedef;
    let mut l = leaves.into_iter();
    let mut s = statics.into_iter();
    A::unflatten(&mut l, &mut s)
}

/// Flattens an output value (the traced function's result).
pub fn flatten_value<R: Pytree>(r: &R) -> Flat {
    let mut f = Flat::default();
    r.flatten(&mut f);
    f
}
