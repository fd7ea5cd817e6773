//! `jax.tree` / `jax.tree_util`: pytree utilities. A pytree is any `Pytree` value:
//! `Array` leaves inside tuples, `Vec`s, `HashMap`/`BTreeMap`s (keys sorted), `Option`s
//! (`None` is an empty node), `()`, `Static` values and `#[derive(Pytree)]` structs.
//!
//! ```ignore
//! #[derive(Clone, jax::tree::Pytree)]
//! struct Params { w: Array, b: Array, #[pytree(static)] act: String }
//! let (leaves, def) = tree_flatten(&params);      // [w, b], PyTreeDef(CustomNode(Params[('relu',)], [*, *]))
//! let p2: Params = tree_unflatten(&def, leaves)?;
//! let scaled = tree_map(|x| x * 2.0, &params);
//! ```

use crate::error::{Error, Result};
pub use crate::trace::pytree::{Args, CustomNode, Flat, MapKey, Pytree, Static, StaticValue, TreeDef};
pub use crate::trace::Array;
/// `#[derive(Pytree)]`: see the `jax_derive` crate (fields marked `#[pytree(static)]`
/// are part of the structure, not leaves).
pub use jax_derive::Pytree;

#[doc(hidden)]
pub use crate::trace::pytree::custom_node;

fn flat_of<T: Pytree>(t: &T) -> Flat {
    let mut f = Flat::default();
    t.flatten(&mut f);
    f
}

fn arrays(f: Flat) -> Vec<Array> {
    f.leaves
        .into_iter()
        .filter_map(|l| match l {
            crate::trace::pytree::ArgLeaf::Value(a) => Some(a),
            crate::trace::pytree::ArgLeaf::Spec(_) => None,
        })
        .collect()
}

/// The leaves of `tree` in flattening order (`jax.tree.leaves`). Map values come in
/// sorted key order; `None` and `Static` contribute none.
pub fn tree_leaves<T: Pytree>(tree: &T) -> Vec<Array> {
    arrays(flat_of(tree))
}

/// The structure of `tree` (`jax.tree.structure`), printing like `PyTreeDef((*, [*, *]))`.
pub fn tree_structure<T: Pytree>(tree: &T) -> TreeDef {
    flat_of(tree).treedef
}

/// Leaves and structure of `tree` (`jax.tree.flatten`).
pub fn tree_flatten<T: Pytree>(tree: &T) -> (Vec<Array>, TreeDef) {
    let mut f = flat_of(tree);
    let def = std::mem::take(&mut f.treedef);
    (arrays(f), def)
}

/// Rebuilds a `T` of structure `def` from `leaves` (`jax.tree.unflatten`).
/// Errors (`TypeError`): `def` is not a structure of `T`, or the number of leaves differs
/// from `def.num_leaves()`.
pub fn tree_unflatten<T: Pytree>(def: &TreeDef, leaves: impl IntoIterator<Item = Array>) -> Result<T> {
    let leaves: Vec<Array> = leaves.into_iter().collect();
    if leaves.len() != def.num_leaves() {
        return Err(Error::type_error(format!(
            "Too {} leaves for PyTreeDef; expected {}, got {}",
            if leaves.len() < def.num_leaves() { "few" } else { "many" },
            def.num_leaves(),
            leaves.len()
        )));
    }
    def.unflatten(leaves)
}

/// Applies `f` to every leaf, keeping the structure (`jax.tree.map` with one tree).
pub fn tree_map<T: Pytree>(mut f: impl FnMut(&Array) -> Array, tree: &T) -> T {
    let (leaves, def) = tree_flatten(tree);
    let mapped: Vec<Array> = leaves.iter().map(&mut f).collect();
    def.unflatten(mapped).expect("a tree rebuilds from its own structure")
}

/// `tree_map` with a fallible `f` (jnp operations that return `Result`).
pub fn try_tree_map<T: Pytree>(mut f: impl FnMut(&Array) -> Result<Array>, tree: &T) -> Result<T> {
    let (leaves, def) = tree_flatten(tree);
    let mapped = leaves.iter().map(&mut f).collect::<Result<Vec<_>>>()?;
    def.unflatten(mapped)
}

/// `jax.tree.map(f, a, b)`: applies `f` to corresponding leaves of two trees of the same
/// structure (an SGD update: `tree_map2(|p, g| p - g * 0.1, &params, &grads)`).
/// Errors (`ValueError`) when the structures differ.
pub fn tree_map2<T: Pytree, U: Pytree>(mut f: impl FnMut(&Array, &Array) -> Array, a: &T, b: &U) -> Result<T> {
    try_tree_map2(|x, y| Ok(f(x, y)), a, b)
}

/// `tree_map2` with a fallible `f`.
pub fn try_tree_map2<T: Pytree, U: Pytree>(mut f: impl FnMut(&Array, &Array) -> Result<Array>, a: &T, b: &U) -> Result<T> {
    let (la, da) = tree_flatten(a);
    let (lb, db) = tree_flatten(b);
    if da != db {
        return Err(Error::value_error(format!("tree_map2: the trees' structures differ: {da} and {db}")));
    }
    let mapped = la.iter().zip(&lb).map(|(x, y)| f(x, y)).collect::<Result<Vec<_>>>()?;
    da.unflatten(mapped)
}

/// A pytree of `ShapeDtypeStruct`s (what `eval_shape` returns): the output's structure and
/// one spec per leaf. Prints like the Python value JAX returns, e.g.
/// `(ShapeDtypeStruct(shape=(3,), dtype=float32), {'n': ShapeDtypeStruct(shape=(), dtype=int32)})`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ShapeTree {
    /// The structure.
    pub treedef: TreeDef,
    /// The leaves' shapes and dtypes, in flattening order.
    pub leaves: Vec<crate::ir::ShapeDtypeStruct>,
}

impl ShapeTree {
    /// A tree of `leaves` (one per leaf of `treedef`).
    pub fn new(treedef: TreeDef, leaves: Vec<crate::ir::ShapeDtypeStruct>) -> ShapeTree {
        ShapeTree { treedef, leaves }
    }
    /// The single spec of a tree that is one leaf. Errors (`ValueError`) otherwise.
    pub fn leaf(&self) -> Result<&crate::ir::ShapeDtypeStruct> {
        match (&self.treedef, self.leaves.as_slice()) {
            (TreeDef::Leaf, [l]) => Ok(l),
            _ => Err(Error::value_error(format!("eval_shape result {} is not a single leaf", self.treedef))),
        }
    }
}

impl std::fmt::Display for ShapeTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let leaves: Vec<String> = self.leaves.iter().map(|l| l.to_string()).collect();
        f.write_str(&self.treedef.format_with_leaves(&leaves))
    }
}
