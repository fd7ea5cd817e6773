//! Pytrees: nested containers of arrays that transformations flatten to a list of leaves
//! and rebuild. Flattening yields the leaves and a `TreeDef` (JAX's `PyTreeDef`): the
//! structure, including `Vec` lengths, sorted map keys and static values, from which
//! `unflatten` rebuilds the value. Arguments pass through `Args`, which also accepts
//! references and Rust scalars (weakly typed), shape specs (`ShapeDtypeStruct`) and
//! `Static` values (part of the cache key, not traced: JAX's `static_argnums`).
//!
//! Containers: `Array` (a leaf), tuples, `Vec` (a list), `HashMap`/`BTreeMap` (a dict with
//! sorted keys, as JAX sorts dict keys), `Option` (`None` is an empty node; `Some(x)` is
//! `x`'s structure), `()`, `Static<T>` and user structs with `#[derive(Pytree)]`.

use super::array::Array;
use crate::error::{Error, Result};
use crate::ir::{Scalar, ShapeDtypeStruct, ShapedArray};
use std::any::Any;
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::fmt::{self, Debug};
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

/// A static value inside a tree structure (a `Static` argument, a static struct field
/// or a map key): compared by hash and printed form, kept as `Any` for rebuilding.
#[derive(Clone)]
pub struct StaticValue {
    /// Python-style text of the value (`3`, `'relu'`, `True`), shown in `PyTreeDef(..)`
    /// and in cache-miss explanations.
    pub repr: String,
    /// Hash of the value (part of the cache key).
    pub hash: u64,
    /// The value itself, for rebuilding.
    pub value: Arc<dyn Any + Send + Sync>,
}

impl StaticValue {
    /// Wraps `v` (hashed, printed Python-style, kept for rebuilding).
    pub fn new<T: Debug + Hash + Send + Sync + Clone + 'static>(v: &T) -> StaticValue {
        let mut h = DefaultHasher::new();
        std::any::TypeId::of::<T>().hash(&mut h);
        v.hash(&mut h);
        StaticValue { repr: py_repr(v), hash: h.finish(), value: Arc::new(v.clone()) }
    }
    /// A plain Rust scalar made static (`static_argnums` on an `Array` position): rebuilt
    /// as a concrete weakly typed 0-d array, printed as Python prints the number.
    pub fn scalar(v: Scalar) -> StaticValue {
        let mut h = DefaultHasher::new();
        std::any::TypeId::of::<Scalar>().hash(&mut h);
        match v {
            Scalar::Bool(b) => (0u8, b as u64).hash(&mut h),
            Scalar::I32(x) => (1u8, x as i64 as u64).hash(&mut h),
            Scalar::I64(x) => (2u8, x as u64).hash(&mut h),
            Scalar::F32(x) => (3u8, x.to_bits() as u64).hash(&mut h),
            Scalar::F64(x) => (4u8, x.to_bits()).hash(&mut h),
        }
        StaticValue { repr: v.jaxpr_text(), hash: h.finish(), value: Arc::new(v) }
    }
    /// A float made static (floats are not `Hash`: hashed by their bits, so `0.0` and
    /// `-0.0` differ, and every NaN payload is its own value).
    pub fn float<T: Debug + Send + Sync + Clone + 'static>(v: &T, bits: u64) -> StaticValue {
        let mut h = DefaultHasher::new();
        std::any::TypeId::of::<T>().hash(&mut h);
        bits.hash(&mut h);
        StaticValue { repr: py_repr(v), hash: h.finish(), value: Arc::new(v.clone()) }
    }
    /// The value as a `T`. Errors (`TypeError`) when it has another type.
    pub fn get<T: Clone + 'static>(&self) -> Result<T> {
        self.value.downcast_ref::<T>().cloned().ok_or_else(|| {
            Error::type_error(format!(
                "pytree static value {} is not a {}",
                self.repr,
                std::any::type_name::<T>()
            ))
        })
    }
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
impl Debug for StaticValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.repr)
    }
}

/// Python's repr for the common static types (strings quoted with `'`, `True`/`False`),
/// `Debug` otherwise.
fn py_repr<T: Debug + 'static>(v: &T) -> String {
    let any = v as &dyn Any;
    let s: Option<&str> = any
        .downcast_ref::<String>()
        .map(|s| s.as_str())
        .or_else(|| any.downcast_ref::<&'static str>().copied());
    if let Some(s) = s {
        return format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"));
    }
    if let Some(b) = any.downcast_ref::<bool>() {
        return if *b { "True" } else { "False" }.to_string();
    }
    format!("{v:?}")
}

/// A node of a user type registered with `#[derive(Pytree)]` (JAX's custom/dataclass
/// node): its children are the non-static fields, its static fields are auxiliary data.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct CustomNode {
    /// The Rust type name (`std::any::type_name`); printed without its module path.
    pub type_name: &'static str,
    /// Names of the fields that are children, in declaration order.
    pub fields: Vec<&'static str>,
    /// Static fields: name and value (auxiliary data: part of the structure).
    pub statics: Vec<(&'static str, StaticValue)>,
    /// The children's structures, one per entry of `fields`.
    pub children: Vec<TreeDef>,
}

/// The structure of a pytree (JAX's `PyTreeDef`): everything but the leaves. Two values
/// with equal `TreeDef`s have the same number of leaves in the same places. Prints like
/// JAX: `PyTreeDef((*, [*, *]))`, `PyTreeDef({'a': *, 'b': None})`,
/// `PyTreeDef(CustomNode(Params[('relu',)], [*, *]))`.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub enum TreeDef {
    /// An array leaf (`*`).
    Leaf,
    /// An empty node (`None`): `Option::None`.
    None,
    /// A tuple of children (`()` is the empty tuple).
    Tuple(Vec<TreeDef>),
    /// A list (`Vec`) of children.
    List(Vec<TreeDef>),
    /// A dict (`HashMap`/`BTreeMap`) with sorted keys.
    Dict { keys: Vec<StaticValue>, children: Vec<TreeDef> },
    /// A `Static` value: no leaves, the value is part of the structure.
    Static(StaticValue),
    /// A `#[derive(Pytree)]` struct.
    Custom(Box<CustomNode>),
    /// The structure of an empty `Flat` (no value flattened yet); prints as `()`.
    #[default]
    Empty,
}

impl TreeDef {
    /// Number of leaves a value of this structure has.
    pub fn num_leaves(&self) -> usize {
        match self {
            TreeDef::Leaf => 1,
            TreeDef::None | TreeDef::Static(_) | TreeDef::Empty => 0,
            _ => self.children().iter().map(|c| c.num_leaves()).sum(),
        }
    }
    /// Number of nodes (leaves included), as JAX's `num_nodes`.
    pub fn num_nodes(&self) -> usize {
        1 + self.children().iter().map(|c| c.num_nodes()).sum::<usize>()
    }
    /// The child structures (empty for leaves and empty nodes).
    pub fn children(&self) -> &[TreeDef] {
        match self {
            TreeDef::Tuple(c) | TreeDef::List(c) => c,
            TreeDef::Dict { children, .. } => children,
            TreeDef::Custom(n) => &n.children,
            _ => &[],
        }
    }
    /// Whether this is a single leaf (`PyTreeDef(*)`).
    pub fn is_leaf(&self) -> bool {
        matches!(self, TreeDef::Leaf)
    }
    /// A tuple node of `children`.
    pub fn tuple(children: Vec<TreeDef>) -> TreeDef {
        TreeDef::Tuple(children)
    }
    /// Equality ignoring the values of `Static` nodes (static arguments are reported
    /// separately from the pytree structure in cache-miss explanations).
    pub fn same_structure(&self, other: &TreeDef) -> bool {
        match (self, other) {
            (TreeDef::Static(_), TreeDef::Static(_)) => true,
            (TreeDef::Tuple(a), TreeDef::Tuple(b)) | (TreeDef::List(a), TreeDef::List(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same_structure(y))
            }
            (TreeDef::Dict { keys: ka, children: a }, TreeDef::Dict { keys: kb, children: b }) => {
                ka == kb && a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same_structure(y))
            }
            (TreeDef::Custom(a), TreeDef::Custom(b)) => {
                a.type_name == b.type_name
                    && a.fields == b.fields
                    && a.statics == b.statics
                    && a.children.len() == b.children.len()
                    && a.children.iter().zip(&b.children).all(|(x, y)| x.same_structure(y))
            }
            (a, b) => a == b,
        }
    }
    /// Ranges of flat leaf indices of each child of the root (for `donate_argnums` on a
    /// tuple of arguments). A root that is not a tuple is one argument.
    pub fn arg_leaf_ranges(&self) -> Vec<std::ops::Range<usize>> {
        match self {
            TreeDef::Tuple(c) => {
                let mut start = 0;
                c.iter()
                    .map(|d| {
                        let n = d.num_leaves();
                        start += n;
                        start - n..start
                    })
                    .collect()
            }
            d => std::iter::once(0..d.num_leaves()).collect(),
        }
    }
    /// Rebuilds a `T` of this structure from `leaves` (JAX's `tree_unflatten`).
    /// Errors (`TypeError`): the structure is not one of `T`'s, or the leaf count differs.
    pub fn unflatten<T: Pytree>(&self, leaves: impl IntoIterator<Item = Array>) -> Result<T> {
        let mut it = leaves.into_iter();
        let t = T::unflatten(self, &mut it)?;
        if it.next().is_some() {
            return Err(Error::type_error(format!("too many leaves for the tree structure {self}")));
        }
        Ok(t)
    }

    /// The Python text of a value of this structure whose leaves print as `leaves` (in
    /// order): tuples `(a, b)`, lists `[a, b]`, dicts `{'k': a}`, `None`, structs as
    /// dataclasses `Params(w=a, b=b, act='relu')`. Missing leaves print as `*`.
    pub fn format_with_leaves(&self, leaves: &[String]) -> String {
        let mut it = leaves.iter();
        let mut s = String::new();
        self.write_value(&mut s, &mut it);
        s
    }

    fn write_value(&self, s: &mut String, leaves: &mut std::slice::Iter<'_, String>) {
        let seq = |s: &mut String, c: &[TreeDef], leaves: &mut std::slice::Iter<'_, String>| {
            for (i, d) in c.iter().enumerate() {
                if i > 0 {
                    s.push_str(", ");
                }
                d.write_value(s, leaves);
            }
        };
        match self {
            TreeDef::Leaf => s.push_str(leaves.next().map(|l| l.as_str()).unwrap_or("*")),
            TreeDef::None => s.push_str("None"),
            TreeDef::Empty => s.push_str("()"),
            TreeDef::Static(v) => s.push_str(&v.repr),
            TreeDef::Tuple(c) => {
                s.push('(');
                seq(s, c, leaves);
                if c.len() == 1 {
                    s.push(',');
                }
                s.push(')');
            }
            TreeDef::List(c) => {
                s.push('[');
                seq(s, c, leaves);
                s.push(']');
            }
            TreeDef::Dict { keys, children } => {
                s.push('{');
                for (i, (k, d)) in keys.iter().zip(children).enumerate() {
                    if i > 0 {
                        s.push_str(", ");
                    }
                    s.push_str(&k.repr);
                    s.push_str(": ");
                    d.write_value(s, leaves);
                }
                s.push('}');
            }
            TreeDef::Custom(n) => {
                s.push_str(&short_type_name(n.type_name));
                s.push('(');
                let mut first = true;
                for (name, d) in n.fields.iter().zip(&n.children) {
                    if !first {
                        s.push_str(", ");
                    }
                    first = false;
                    s.push_str(name);
                    s.push('=');
                    d.write_value(s, leaves);
                }
                for (name, v) in &n.statics {
                    if !first {
                        s.push_str(", ");
                    }
                    first = false;
                    s.push_str(name);
                    s.push('=');
                    s.push_str(&v.repr);
                }
                s.push(')');
            }
        }
    }

    fn write_node(&self, s: &mut String) {
        let join = |s: &mut String, c: &[TreeDef]| {
            for (i, d) in c.iter().enumerate() {
                if i > 0 {
                    s.push_str(", ");
                }
                d.write_node(s);
            }
        };
        match self {
            TreeDef::Leaf => s.push('*'),
            TreeDef::None => s.push_str("None"),
            TreeDef::Empty => s.push_str("()"),
            TreeDef::Tuple(c) => {
                s.push('(');
                join(s, c);
                if c.len() == 1 {
                    s.push(',');
                }
                s.push(')');
            }
            TreeDef::List(c) => {
                s.push('[');
                join(s, c);
                s.push(']');
            }
            TreeDef::Dict { keys, children } => {
                s.push('{');
                for (i, (k, d)) in keys.iter().zip(children).enumerate() {
                    if i > 0 {
                        s.push_str(", ");
                    }
                    s.push_str(&k.repr);
                    s.push_str(": ");
                    d.write_node(s);
                }
                s.push('}');
            }
            TreeDef::Static(v) => {
                s.push_str("static(");
                s.push_str(&v.repr);
                s.push(')');
            }
            TreeDef::Custom(n) => {
                let name = short_type_name(n.type_name);
                let statics: Vec<&str> = n.statics.iter().map(|(_, v)| v.repr.as_str()).collect();
                let aux = match statics.len() {
                    1 => format!("({},)", statics[0]),
                    _ => format!("({})", statics.join(", ")),
                };
                s.push_str(&format!("CustomNode({name}[{aux}], ["));
                join(s, &n.children);
                s.push_str("])");
            }
        }
    }
}

/// `a::b::Params<f32>` → `Params<f32>` (module paths dropped, generic arguments kept short).
fn short_type_name(t: &str) -> String {
    let mut out = String::new();
    let mut word = String::new();
    for c in t.chars() {
        if c.is_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
        } else {
            out.push_str(word.rsplit("::").next().unwrap_or(""));
            word.clear();
            out.push(c);
        }
    }
    out.push_str(word.rsplit("::").next().unwrap_or(""));
    out
}

impl fmt::Display for TreeDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        self.write_node(&mut s);
        write!(f, "PyTreeDef({s})")
    }
}
impl Debug for TreeDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// One argument leaf: a value, or only a type (for `trace`/`lower` with specs).
#[derive(Clone, Debug)]
pub enum ArgLeaf {
    Value(Array),
    Spec(ShapedArray),
}

impl ArgLeaf {
    /// The leaf's abstract value.
    pub fn aval(&self) -> ShapedArray {
        match self {
            ArgLeaf::Value(a) => a.aval(),
            ArgLeaf::Spec(s) => s.clone(),
        }
    }
}

/// Flattened arguments: leaves, `Static` argument values (also inside `treedef`) and the
/// tree structure.
#[derive(Clone, Default)]
pub struct Flat {
    pub leaves: Vec<ArgLeaf>,
    pub statics: Vec<StaticValue>,
    pub treedef: TreeDef,
    /// Leaves that came from plain Rust scalars passed for an `Array` (index into
    /// `leaves`, value): `static_argnums` turns these into static values.
    pub scalars: Vec<(usize, Scalar)>,
}

impl Flat {
    /// Flattens `x` into this `Flat`'s leaves and returns `x`'s structure (for
    /// container implementations: flatten each child, collect the structures).
    pub fn child<T: Pytree>(&mut self, x: &T) -> TreeDef {
        x.flatten(self);
        std::mem::take(&mut self.treedef)
    }
    /// As `child`, for argument values (`Args`).
    pub fn child_arg<A, X: Args<A>>(&mut self, x: X) -> TreeDef {
        x.flatten_args(self);
        std::mem::take(&mut self.treedef)
    }
}

/// A pytree type: flattens to array leaves and a `TreeDef`, and is rebuilt from them.
/// Implement it with `#[derive(Pytree)]` for structs (fields marked `#[pytree(static)]`
/// become part of the structure rather than leaves).
pub trait Pytree: Clone + 'static {
    /// Appends this value's leaves (and `Static` values) to `flat` and sets
    /// `flat.treedef` to this value's structure.
    fn flatten(&self, flat: &mut Flat);
    /// Rebuilds a value of structure `def` from leaves taken in `flatten` order.
    /// Errors (`TypeError`): `def` is not a structure of this type, or too few leaves.
    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Array>) -> Result<Self>;
}

fn missing() -> Error {
    Error::type_error("pytree structure mismatch: fewer leaves than the structure needs")
}

/// The error for a structure that does not fit the type being rebuilt.
pub fn structure_mismatch(def: &TreeDef, want: &str) -> Error {
    Error::type_error(format!("pytree structure mismatch: cannot rebuild a {want} from {def}"))
}

impl Pytree for Array {
    fn flatten(&self, flat: &mut Flat) {
        flat.leaves.push(ArgLeaf::Value(self.clone()));
        flat.treedef = TreeDef::Leaf;
    }
    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Array>) -> Result<Self> {
        match def {
            TreeDef::Leaf => leaves.next().ok_or_else(missing),
            // A Rust scalar made static by `static_argnums`: a concrete array in the trace.
            TreeDef::Static(v) if v.value.is::<Scalar>() => Ok(Array::weak_scalar(v.get::<Scalar>()?)),
            d => Err(structure_mismatch(d, "leaf (Array)")),
        }
    }
}

impl<T: Clone + Debug + Hash + Eq + Send + Sync + 'static> Pytree for Static<T> {
    fn flatten(&self, flat: &mut Flat) {
        let v = StaticValue::new(&self.0);
        flat.statics.push(v.clone());
        flat.treedef = TreeDef::Static(v);
    }
    fn unflatten(def: &TreeDef, _: &mut dyn Iterator<Item = Array>) -> Result<Self> {
        match def {
            TreeDef::Static(v) => v.get::<T>().map(Static),
            d => Err(structure_mismatch(d, "Static")),
        }
    }
}

/// Plain Rust values in a function's argument types are static, as if listed in JAX's
/// `static_argnums`: the function sees the concrete value (`if n > 3 { .. }` works), the
/// value is part of the structure and of the jit cache key (a new value retraces).
/// `$value` makes the `StaticValue` of `self` (floats hash by their bits).
macro_rules! static_pytree {
    ($value:expr; $($t:ty),+) => {$(
        impl Pytree for $t {
            fn flatten(&self, flat: &mut Flat) {
                let value: fn(&$t) -> StaticValue = $value;
                let v = value(self);
                flat.statics.push(v.clone());
                flat.treedef = TreeDef::Static(v);
            }
            fn unflatten(def: &TreeDef, _: &mut dyn Iterator<Item = Array>) -> Result<Self> {
                match def {
                    TreeDef::Static(v) => v.get::<$t>(),
                    d => Err(structure_mismatch(d, stringify!($t))),
                }
            }
        }
        impl Args<$t> for $t {
            fn flatten_args(self, flat: &mut Flat) {
                self.flatten(flat)
            }
        }
        impl Args<$t> for &$t {
            fn flatten_args(self, flat: &mut Flat) {
                self.flatten(flat)
            }
        }
    )+};
}
static_pytree!(|x| StaticValue::new(x); usize, u8, u16, u32, u64, i8, i16, i32, i64, bool, char, String, &'static str);
static_pytree!(|x| StaticValue::float(x, x.to_bits() as u64); f32, f64);

impl<T: Pytree> Pytree for Vec<T> {
    fn flatten(&self, flat: &mut Flat) {
        let c = self.iter().map(|x| flat.child(x)).collect();
        flat.treedef = TreeDef::List(c);
    }
    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Array>) -> Result<Self> {
        match def {
            TreeDef::List(c) => c.iter().map(|d| T::unflatten(d, leaves)).collect(),
            d => Err(structure_mismatch(d, "Vec")),
        }
    }
}

impl<T: Pytree> Pytree for Option<T> {
    fn flatten(&self, flat: &mut Flat) {
        match self {
            Some(x) => x.flatten(flat),
            None => flat.treedef = TreeDef::None,
        }
    }
    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Array>) -> Result<Self> {
        match def {
            TreeDef::None => Ok(None),
            d => T::unflatten(d, leaves).map(Some),
        }
    }
}

impl Pytree for () {
    fn flatten(&self, flat: &mut Flat) {
        flat.treedef = TreeDef::Tuple(vec![]);
    }
    fn unflatten(def: &TreeDef, _: &mut dyn Iterator<Item = Array>) -> Result<Self> {
        match def {
            TreeDef::Tuple(c) if c.is_empty() => Ok(()),
            TreeDef::Empty => Ok(()),
            d => Err(structure_mismatch(d, "()")),
        }
    }
}

/// Map keys: hashable, ordered (dict keys are sorted), printable.
pub trait MapKey: Clone + Ord + Debug + Hash + Eq + Send + Sync + 'static {}
impl<K: Clone + Ord + Debug + Hash + Eq + Send + Sync + 'static> MapKey for K {}

fn dict_flatten<'a, K: MapKey, T: Pytree>(flat: &mut Flat, items: impl Iterator<Item = (&'a K, &'a T)>) {
    let mut items: Vec<(&K, &T)> = items.collect();
    items.sort_by(|a, b| a.0.cmp(b.0));
    let keys = items.iter().map(|(k, _)| StaticValue::new(*k)).collect();
    let children = items.iter().map(|(_, v)| flat.child(*v)).collect();
    flat.treedef = TreeDef::Dict { keys, children };
}

fn dict_unflatten<K: MapKey, T: Pytree>(def: &TreeDef, leaves: &mut dyn Iterator<Item = Array>, what: &str) -> Result<Vec<(K, T)>> {
    match def {
        TreeDef::Dict { keys, children } => {
            keys.iter().zip(children).map(|(k, d)| Ok((k.get::<K>()?, T::unflatten(d, leaves)?))).collect()
        }
        d => Err(structure_mismatch(d, what)),
    }
}

impl<K: MapKey, T: Pytree> Pytree for HashMap<K, T> {
    fn flatten(&self, flat: &mut Flat) {
        dict_flatten(flat, self.iter())
    }
    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Array>) -> Result<Self> {
        Ok(dict_unflatten(def, leaves, "HashMap")?.into_iter().collect())
    }
}

impl<K: MapKey, T: Pytree> Pytree for BTreeMap<K, T> {
    fn flatten(&self, flat: &mut Flat) {
        dict_flatten(flat, self.iter())
    }
    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Array>) -> Result<Self> {
        Ok(dict_unflatten(def, leaves, "BTreeMap")?.into_iter().collect())
    }
}

macro_rules! tuple_pytree {
    ($n:literal; $($t:ident $i:tt),+) => {
        impl<$($t: Pytree),+> Pytree for ($($t,)+) {
            fn flatten(&self, flat: &mut Flat) {
                let c = vec![$(flat.child(&self.$i)),+];
                flat.treedef = TreeDef::Tuple(c);
            }
            fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Array>) -> Result<Self> {
                match def {
                    TreeDef::Tuple(c) if c.len() == $n => Ok(($($t::unflatten(&c[$i], leaves)?,)+)),
                    d => Err(structure_mismatch(d, concat!("tuple of ", $n))),
                }
            }
        }
    };
}
tuple_pytree!(1; A 0);
tuple_pytree!(2; A 0, B 1);
tuple_pytree!(3; A 0, B 1, C 2);
tuple_pytree!(4; A 0, B 1, C 2, D 3);
tuple_pytree!(5; A 0, B 1, C 2, D 3, E 4);
tuple_pytree!(6; A 0, B 1, C 2, D 3, E 4, F 5);
tuple_pytree!(7; A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_pytree!(8; A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);

/// Values accepted where a jitted function's argument of type `A` is expected:
/// `A` itself, `&Array`, Rust scalars (weakly typed 0-d arrays), `ShapeDtypeStruct`
/// specs, and containers of these (tuples, `Vec`, maps, `Option`).
pub trait Args<A> {
    /// Appends the leaves and sets `flat.treedef` (as `Pytree::flatten`).
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
        flat.treedef = TreeDef::Leaf;
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
                let v = Scalar::$s(self as _);
                flat.scalars.push((flat.leaves.len(), v));
                Array::weak_scalar(v).flatten(flat)
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
impl Args<()> for () {
    fn flatten_args(self, flat: &mut Flat) {
        ().flatten(flat)
    }
}
impl<A: Pytree, X: Args<A>> Args<Vec<A>> for Vec<X> {
    fn flatten_args(self, flat: &mut Flat) {
        let c = self.into_iter().map(|x| flat.child_arg(x)).collect();
        flat.treedef = TreeDef::List(c);
    }
}
impl<A: Pytree> Args<Vec<A>> for &Vec<A> {
    fn flatten_args(self, flat: &mut Flat) {
        self.flatten(flat)
    }
}
impl<A: Pytree, X: Args<A>> Args<Option<A>> for Option<X> {
    fn flatten_args(self, flat: &mut Flat) {
        match self {
            Some(x) => x.flatten_args(flat),
            None => flat.treedef = TreeDef::None,
        }
    }
}
fn dict_args<K: MapKey, A, X: Args<A>>(flat: &mut Flat, items: impl Iterator<Item = (K, X)>) {
    let mut items: Vec<(K, X)> = items.collect();
    items.sort_by(|a, b| a.0.cmp(&b.0));
    let mut keys = Vec::with_capacity(items.len());
    let mut children = Vec::with_capacity(items.len());
    for (k, x) in items {
        keys.push(StaticValue::new(&k));
        children.push(flat.child_arg(x));
    }
    flat.treedef = TreeDef::Dict { keys, children };
}
impl<K: MapKey, A: Pytree, X: Args<A>> Args<HashMap<K, A>> for HashMap<K, X> {
    fn flatten_args(self, flat: &mut Flat) {
        dict_args(flat, self.into_iter())
    }
}
impl<K: MapKey, A: Pytree> Args<HashMap<K, A>> for &HashMap<K, A> {
    fn flatten_args(self, flat: &mut Flat) {
        self.flatten(flat)
    }
}
impl<K: MapKey, A: Pytree, X: Args<A>> Args<BTreeMap<K, A>> for BTreeMap<K, X> {
    fn flatten_args(self, flat: &mut Flat) {
        dict_args(flat, self.into_iter())
    }
}
impl<K: MapKey, A: Pytree> Args<BTreeMap<K, A>> for &BTreeMap<K, A> {
    fn flatten_args(self, flat: &mut Flat) {
        self.flatten(flat)
    }
}

macro_rules! tuple_args {
    ($($a:ident $x:ident $i:tt),+) => {
        impl<$($a: Pytree, $x: Args<$a>),+> Args<($($a,)+)> for ($($x,)+) {
            fn flatten_args(self, flat: &mut Flat) {
                let c = vec![$(flat.child_arg(self.$i)),+];
                flat.treedef = TreeDef::Tuple(c);
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
tuple_args!(A X 0, B Y 1, C Z 2, D W 3, E V 4, F U 5, G T 6);
tuple_args!(A X 0, B Y 1, C Z 2, D W 3, E V 4, F U 5, G T 6, H S 7);

/// Rebuilds an `A` of structure `treedef` from leaves (the static values are inside
/// `treedef`; `statics` is accepted for the callers that also carry them).
/// Errors (`TypeError`): the structure does not fit `A`, or the leaf count differs.
pub fn unflatten_like<A: Pytree>(treedef: &TreeDef, leaves: Vec<Array>, statics: Vec<StaticValue>) -> Result<A> {
    let _ = statics;
    treedef.unflatten(leaves)
}

/// Flattens an output value (the traced function's result).
pub fn flatten_value<R: Pytree>(r: &R) -> Flat {
    let mut f = Flat::default();
    r.flatten(&mut f);
    f
}

/// Rebuilds a derived struct's static field (used by `#[derive(Pytree)]`).
#[doc(hidden)]
pub fn custom_node<'d>(def: &'d TreeDef, type_name: &str, n_children: usize, n_statics: usize) -> Result<&'d CustomNode> {
    match def {
        TreeDef::Custom(n) if n.type_name == type_name && n.children.len() == n_children && n.statics.len() == n_statics => Ok(n),
        d => Err(structure_mismatch(d, short_type_name(type_name).as_str())),
    }
}
