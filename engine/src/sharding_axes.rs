//! Switching mesh axes between `Explicit` and `Auto` for part of a program:
//! `jax.sharding.auto_axes`, `jax.sharding.explicit_axes` and `get_abstract_mesh`
//! (JAX's explicit-sharding page, "Using a mixture of sharding modes").
//!
//! `auto_axes(f, axes, out_sharding)` runs `f` with `axes` (all of the mesh's when `None`)
//! `Auto`: inside, shardings over them leave the types (`int32[4,4]`), so a conflict JAX
//! would reject in explicit mode (`P('X', None) + P(None, 'X')`) is the compiler's choice
//! instead of an error, and the results are resharded to `out_sharding` on the mesh
//! (`int32[4@X,4]`). `explicit_axes(f, axes, in_sharding)` is the converse on an `Auto`
//! mesh: the arguments are laid out as `in_sharding` and their types inside `f` carry it
//! (`float32[4@X,4@Y]`); the results keep their layout and leave explicit mode.
//!
//! How: on concrete arrays the arguments move onto a copy of the mesh with the new axis
//! types (same devices, same layout: JAX's `mesh_cast`), so every eager op applies the
//! sharding rules of that mode, and the results move back. Inside `jit` the partitioner
//! sees one mesh, so an argument of `auto_axes` is constrained to its layout without the
//! switched axes (replicated over them: a compiler's choice JAX's partitioner may make
//! differently, where `inspect_array_sharding` inside shows `P('X',)`), and an argument of
//! `explicit_axes` to `in_sharding`; `typeof_` and `get_abstract_mesh` show the switched
//! axis types while `f` runs.

use crate::error::{Error, Result};
use crate::ir::parallel::abstract_mesh;
use crate::sharding::{get_mesh, AxisType, Mesh, NamedSharding, PEntry, PartitionSpec};
use crate::trace::pytree::{flatten_value, unflatten_like, ArgLeaf, Flat, Pytree};
use crate::trace::Array;
use crate::transform::jit::TraceOutput;
use crate::transform::shard_map::Specs;
use std::cell::RefCell;
use std::fmt;

thread_local! {
    /// The meshes with switched axis types of the `auto_axes`/`explicit_axes` calls
    /// running on this thread, innermost last.
    static SCOPE: RefCell<Vec<Mesh>> = const { RefCell::new(Vec::new()) };
}

/// Pops the scope pushed with it when dropped (also on an error or a panic in `f`).
pub(crate) struct ScopeGuard;

impl ScopeGuard {
    /// Makes `m` the context's abstract mesh until the guard drops: an `auto_axes` /
    /// `explicit_axes` mesh with switched axis types, or a `shard_map` body's mesh with
    /// every axis `Manual`.
    pub(crate) fn push(m: &Mesh) -> ScopeGuard {
        SCOPE.with(|s| s.borrow_mut().push(m.clone()));
        ScopeGuard
    }
}

/// The innermost scope mesh (an `auto_axes`/`explicit_axes` or `shard_map` body's).
fn scope_mesh() -> Option<Mesh> {
    SCOPE.with(|s| s.borrow().last().cloned())
}

/// Whether `m` has a `Manual` axis (a `shard_map` body's mesh).
fn is_manual(m: &Mesh) -> bool {
    m.axis_types().contains(&AxisType::Manual)
}

impl Drop for ScopeGuard {
    fn drop(&mut self) {
        SCOPE.with(|s| {
            s.borrow_mut().pop();
        });
    }
}

/// `m` with the axis types of the innermost `auto_axes`/`explicit_axes` running on this
/// thread when that one switched a mesh of the same axes and devices; else `m`.
pub(crate) fn axes_in_scope(m: &Mesh) -> Mesh {
    SCOPE.with(|s| match s.borrow().last() {
        Some(top) if !is_manual(top) && top.same_grid(m) => top.clone(),
        _ => m.clone(),
    })
}

/// The mesh of the context as JAX's `get_abstract_mesh()` returns it (devices left out):
/// `{}` prints `AbstractMesh('X': 4, 'Y': 2, axis_types=(Explicit, Explicit),
/// device_kind=cpu, num_cores=None, platform=cpu)`, or `AbstractMesh((), axis_types=())`
/// with no mesh.
#[derive(Clone, PartialEq, Eq)]
pub struct AbstractMesh(pub Option<Mesh>);

impl AbstractMesh {
    /// The axis names, major to minor (empty with no mesh).
    pub fn axis_names(&self) -> Vec<String> {
        self.0.as_ref().map(|m| m.axis_names().to_vec()).unwrap_or_default()
    }
    /// Each axis's type (empty with no mesh).
    pub fn axis_types(&self) -> Vec<AxisType> {
        self.0.as_ref().map(|m| m.axis_types().to_vec()).unwrap_or_default()
    }
}

impl fmt::Display for AbstractMesh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(m) => f.write_str(&abstract_mesh(m)),
            None => f.write_str("AbstractMesh((), axis_types=())"),
        }
    }
}
impl fmt::Debug for AbstractMesh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// `jax.sharding.get_abstract_mesh()`: the mesh of the innermost running `auto_axes` /
/// `explicit_axes` (with its switched axis types) or `shard_map` body (every axis
/// `Manual`), else the mesh set by `set_mesh`; `AbstractMesh((), axis_types=())` if none
/// (as JAX, also inside `jit` over sharded arguments when no mesh is set).
pub fn get_abstract_mesh() -> AbstractMesh {
    AbstractMesh(scope_mesh().or_else(get_mesh))
}

/// A function wrapped by `auto_axes` or `explicit_axes`: call it with `.call(args)` (one
/// pytree; several arguments are a tuple; `&Array` leaves are accepted), inside or outside
/// `jit`. Cheap to clone. (The same wrapper as `shard_map`'s.)
pub type AxesMapped<A, R> = crate::transform::shard_map::ShardMapped<A, R>;

/// The context mesh (the innermost `auto_axes`/`explicit_axes` one, else `set_mesh`'s, else
/// inside `jit` the arguments' mesh, else the first sharded concrete argument's), or `None`.
/// Errors: inside a `shard_map` body (JAX's `NotImplementedError`).
fn context_mesh(leaves: &[Array]) -> Result<Option<Mesh>> {
    if let Some(m) = scope_mesh() {
        if is_manual(&m) {
            // JAX 0.10.2's text.
            return Err(Error::new(
                crate::error::ErrorKind::NotImplemented,
                "Going from `Manual` AxisType to `Auto` or `Explicit` AxisType is not allowed. Please file a bug at https://github.com/jax-ml/jax/issues with your use case",
            ));
        }
        return Ok(Some(m));
    }
    let from_args = || leaves.iter().find_map(|x| x.sharding().ok().and_then(|s| s.mesh().cloned()));
    Ok(get_mesh().or_else(crate::trace::traced_args_mesh).or_else(from_args))
}

/// `mesh`'s positions of `axes` (all its axes for `None`). Errors: a name `mesh` lacks.
fn mesh_and_axes(api: &str, axes: &Option<Vec<String>>, mesh: Mesh) -> Result<(Mesh, Vec<usize>)> {
    let ks = match axes {
        None => (0..mesh.axis_names().len()).collect(),
        Some(names) => names
            .iter()
            .map(|n| {
                mesh.axis_names().iter().position(|a| a == n).ok_or_else(|| {
                    Error::value_error(format!(
                        "{api}: axis '{n}' is not an axis of the mesh {}",
                        crate::ir::parallel::names_tuple(mesh.axis_names())
                    ))
                })
            })
            .collect::<Result<Vec<usize>>>()?,
    };
    Ok((mesh, ks))
}

/// `mesh` with the axes at `ks` set to `to`.
fn switched(mesh: &Mesh, ks: &[usize], to: AxisType) -> Result<Mesh> {
    let mut types = mesh.axis_types().to_vec();
    for &k in ks {
        types[k] = to;
    }
    mesh.with_axis_types(&types)
}

/// `spec` without the mesh axes in `drop`.
fn without_axes(spec: &PartitionSpec, drop: &[String]) -> PartitionSpec {
    PartitionSpec::from_entries(spec.0.iter().map(|e| PEntry(e.0.iter().filter(|a| !drop.contains(a)).cloned().collect())).collect())
}

/// `specs` for `n` leaves: one per leaf, or one repeated.
fn per_leaf(specs: &Specs, n: usize, api: &str, what: &str) -> Result<Vec<PartitionSpec>> {
    match specs.0.len() {
        k if k == n => Ok(specs.0.clone()),
        1 => Ok(vec![specs.0[0].clone(); n]),
        k => Err(Error::value_error(format!("{api} was given {k} {what} for {n} array leaves: give one PartitionSpec per leaf, or one for all"))),
    }
}

/// Moves a concrete array onto `to` (same devices and layout, other axis types), keeping
/// its spec; an unsharded one is laid out as `spec` there.
fn onto(x: &Array, to: &Mesh, spec: &PartitionSpec) -> Result<Array> {
    crate::sharding::check_reshard_devices(x, to)?;
    let spec = match x.sharding() {
        Ok(crate::sharding::Sharding::Named(ns)) if ns.mesh.devices() == to.devices() => ns.spec.clone(),
        _ => spec.clone(),
    };
    crate::sharding::device_put(x, NamedSharding::new(to, spec)?)
}

/// `jax.sharding.auto_axes(f, axes=axes, out_sharding=out_sharding)`: `f` with the mesh
/// axes `axes` (all when `None`) in `Auto` mode while it runs; each result is then laid out
/// as its `out_sharding` spec on the mesh (one spec per result leaf, or one for all; JAX
/// requires the argument too). The mesh is that of an enclosing `auto_axes`/`explicit_axes`,
/// else the one set by `set_mesh`, else (inside `jit`) that of the call's sharded
/// arguments, else the first sharded argument's; with none, `f` is just called (as JAX).
/// Works eagerly and inside `jit` (see the module docs for the layout inside). Errors:
/// `ValueError` for an axis the mesh lacks or a wrong number of specs; `NotImplementedError`
/// inside a `shard_map` body (its axes are `Manual`); `f`'s errors; as `device_put`/`reshard`.
#[track_caller]
pub fn auto_axes<A: Pytree, O: TraceOutput, F: Fn(A) -> O + 'static>(f: F, axes: Option<&[&str]>, out_sharding: impl Into<Specs>) -> AxesMapped<A, O::Out> {
    let axes: Option<Vec<String>> = axes.map(|a| a.iter().map(|s| s.to_string()).collect());
    let out_specs = out_sharding.into();
    let run = move |a: A| -> Result<O::Out> {
        let mut flat = Flat::default();
        a.flatten(&mut flat);
        let leaves = values(&flat)?;
        let Some(mesh) = context_mesh(&leaves)? else {
            // As JAX: with no mesh in context there are no axes to switch.
            let a = unflatten_like::<A>(&flat.treedef, leaves, flat.statics)?;
            return f(a).into_result();
        };
        let (mesh, ks) = mesh_and_axes("auto_axes", &axes, mesh)?;
        let auto = switched(&mesh, &ks, AxisType::Auto)?;
        let names: Vec<String> = ks.iter().map(|&k| mesh.axis_names()[k].clone()).collect();
        let moved = leaves
            .iter()
            .map(|x| {
                if x.is_tracer() {
                    // Constrained to its own layout first: a no-op forward, but its
                    // transpose lays a cotangent back out as the argument (JAX's mesh_cast
                    // back: `grad` gives the primal's type, `float32[8@X]`).
                    let own = crate::sharding::typeof_(x).sharding.filter(|s| s.mesh.axis_names() == mesh.axis_names()).map(|s| s.spec);
                    let x = match &own {
                        Some(spec) => crate::sharding_rules::constrain(x, NamedSharding::new(&mesh, spec.clone())?)?,
                        None => x.clone(),
                    };
                    let spec = own.map(|s| without_axes(&s, &names)).unwrap_or_default();
                    crate::sharding_rules::constrain(&x, NamedSharding::new(&mesh, spec)?)
                } else {
                    onto(x, &auto, &PartitionSpec::default())
                }
            })
            .collect::<Result<Vec<Array>>>()?;
        let a = unflatten_like::<A>(&flat.treedef, moved, flat.statics)?;
        let r = {
            let _scope = ScopeGuard::push(&auto);
            f(a).into_result()?
        };
        let out = flatten_value(&r);
        let outs = values(&out)?;
        let specs = per_leaf(&out_specs, outs.len(), "auto_axes", "out_sharding specs")?;
        let placed = outs.iter().zip(specs).map(|(y, s)| crate::sharding_rules::constrain(y, NamedSharding::new(&mesh, s)?)).collect::<Result<Vec<Array>>>()?;
        unflatten_like::<O::Out>(&out.treedef, placed, out.statics)
    };
    AxesMapped::new("auto_axes", run)
}

/// `jax.sharding.explicit_axes(f, axes=axes, in_sharding=in_sharding)`: on a mesh whose
/// `axes` (all when `None`) are `Auto`, `f` runs with them `Explicit`, its arguments laid
/// out as `in_sharding` (one spec per argument leaf, or one for all) so that their types
/// carry it (`float32[4@X,4@Y]`) and explicit mode's errors apply to concrete arrays; the
/// results keep their layout back on the mesh (types plain again). The mesh is found as
/// for [`auto_axes`]. Errors: as [`auto_axes`], and JAX's `ValueError` "Context mesh cannot
/// be empty…" with no mesh.
#[track_caller]
pub fn explicit_axes<A: Pytree, O: TraceOutput, F: Fn(A) -> O + 'static>(f: F, axes: Option<&[&str]>, in_sharding: impl Into<Specs>) -> AxesMapped<A, O::Out> {
    let axes: Option<Vec<String>> = axes.map(|a| a.iter().map(|s| s.to_string()).collect());
    let in_specs = in_sharding.into();
    let run = move |a: A| -> Result<O::Out> {
        let mut flat = Flat::default();
        a.flatten(&mut flat);
        let leaves = values(&flat)?;
        // JAX 0.10.2's text.
        let mesh = context_mesh(&leaves)?.ok_or_else(|| {
            Error::value_error("Context mesh cannot be empty. Please use `jax.set_mesh` API to enter into a mesh context when using `explicit_axes` API.")
        })?;
        let (mesh, ks) = mesh_and_axes("explicit_axes", &axes, mesh)?;
        let explicit = switched(&mesh, &ks, AxisType::Explicit)?;
        let specs = per_leaf(&in_specs, leaves.len(), "explicit_axes", "in_sharding specs")?;
        let moved = leaves
            .iter()
            .zip(&specs)
            .map(|(x, s)| {
                if x.is_tracer() {
                    crate::sharding_rules::constrain(x, NamedSharding::new(&mesh, s.clone())?)
                } else {
                    crate::sharding::check_reshard_devices(x, &explicit)?;
                    crate::sharding::device_put(x, NamedSharding::new(&explicit, s.clone())?)
                }
            })
            .collect::<Result<Vec<Array>>>()?;
        let a = unflatten_like::<A>(&flat.treedef, moved, flat.statics)?;
        let r = {
            let _scope = ScopeGuard::push(&explicit);
            f(a).into_result()?
        };
        let out = flatten_value(&r);
        let outs = values(&out)?;
        let back = outs
            .iter()
            .map(|y| {
                if !y.is_tracer() {
                    return onto(y, &mesh, &PartitionSpec::default());
                }
                // Back on the enclosing mesh with the layout it has: a result that an inner
                // constraint laid out on the switched mesh (an `auto_axes` inside) would
                // otherwise leave a `jit` with that mesh's axis types (`float32[8,4@Y]`
                // where JAX's is `float32[8,4]` on an `Auto` mesh).
                match crate::sharding::typeof_(y).sharding.filter(|s| s.mesh.same_grid(&mesh) && s.spec.0.iter().any(|e| !e.0.is_empty())) {
                    Some(s) => crate::sharding_rules::constrain(y, NamedSharding::new(&mesh, s.spec)?),
                    None => Ok(y.clone()),
                }
            })
            .collect::<Result<Vec<Array>>>()?;
        unflatten_like::<O::Out>(&out.treedef, back, out.statics)
    };
    AxesMapped::new("explicit_axes", run)
}

/// The array leaves of `flat`. Errors: a `ShapeDtypeStruct` leaf.
fn values(flat: &Flat) -> Result<Vec<Array>> {
    flat.leaves
        .iter()
        .map(|l| match l {
            ArgLeaf::Value(a) => Ok(a.clone()),
            ArgLeaf::Spec(_) => Err(Error::type_error("auto_axes/explicit_axes need array values, not ShapeDtypeStructs")),
        })
        .collect()
}
