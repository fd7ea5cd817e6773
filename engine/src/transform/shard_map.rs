//! `shard_map`: per-device programming with explicit collectives (JAX's `jax.shard_map`).
//!
//! The function is traced once on the per-device block types into a body jaxpr (mesh
//! axes bound for its collectives) and bound as one `shard_map` equation, so it is staged
//! into an enclosing `jit` or runs at once. Running it splits each operand into blocks by
//! its in_spec (reusing the shards of an array already sharded that way), runs the body
//! once per device on its own thread (each equation bound eagerly, compiled once per
//! signature, and placed on that device; collectives meet at the rendezvous of
//! `runtime::collectives`), and assembles the results as arrays sharded by the out_specs
//! whose shards are the devices' own results (no copy).
//!
//! Invariant: with `check_vma`, an output whose out_spec omits a mesh axis is proved
//! invariant over that axis (it went through a `psum`/`pmax`/`pmin` over it, or never
//! depended on a value varying over it) before anything runs; JAX's error otherwise.
//! Reference semantics: `shard_map(f, P('i'), P('i'))(y)` equals the concatenation of `f`
//! applied to each block of `y` (JAX's shard-map page).

use super::interp::{atom_array, operand, trace_to_jaxpr, Env};
use crate::error::{Error, Result};
use crate::ir::{Atom, Collective, Jaxpr, Primitive, ShapedArray, ShardMapParams};
use crate::runtime::collectives::MeshRun;
use crate::runtime::DeviceArray;
use crate::sharding::{get_mesh, Mesh, NamedSharding, PartitionSpec};
use crate::trace::pytree::{flatten_value, unflatten_like, ArgLeaf, Flat, Pytree};
use crate::trace::{bind, Array, Operand};
use super::jit::TraceOutput;
use std::panic::Location;
use std::sync::Arc;

/// The specs of a `shard_map`'s arguments or results: one `PartitionSpec` per leaf, or
/// one for all leaves. `P!("i")`, `[P!("i"), P!()]`, a tuple `(P!("i"), P!())` (JAX's
/// `in_specs=(P('i'), P())`, up to 8), `vec![..]` and `()` (no leaves) convert.
#[derive(Clone, Debug, Default)]
pub struct Specs(pub Vec<PartitionSpec>);

impl From<PartitionSpec> for Specs {
    fn from(p: PartitionSpec) -> Self {
        Specs(vec![p])
    }
}
impl From<Vec<PartitionSpec>> for Specs {
    fn from(p: Vec<PartitionSpec>) -> Self {
        Specs(p)
    }
}
impl<const N: usize> From<[PartitionSpec; N]> for Specs {
    fn from(p: [PartitionSpec; N]) -> Self {
        Specs(p.to_vec())
    }
}
impl From<()> for Specs {
    fn from(_: ()) -> Self {
        Specs(vec![])
    }
}
// `(P!("i"), P!())` and longer tuples: one spec per element.
macro_rules! spec_ty {
    ($v:ident) => {
        PartitionSpec
    };
}
macro_rules! specs_from_tuple {
    ($($v:ident),+) => {
        impl From<($(spec_ty!($v),)+)> for Specs {
            fn from(($($v,)+): ($(spec_ty!($v),)+)) -> Self {
                Specs(vec![$($v),+])
            }
        }
    };
}
specs_from_tuple!(a, b);
specs_from_tuple!(a, b, c);
specs_from_tuple!(a, b, c, d);
specs_from_tuple!(a, b, c, d, e);
specs_from_tuple!(a, b, c, d, e, f);
specs_from_tuple!(a, b, c, d, e, f, g);
specs_from_tuple!(a, b, c, d, e, f, g, h);

/// A function mapped by `shard_map` (or wrapped by `auto_axes`/`explicit_axes`): call it
/// with `.call(args)` (one pytree; several arguments are a tuple; `&Array` leaves are
/// accepted), inside or outside `jit`. Cheap to clone (the function is shared).
pub struct ShardMapped<A, R> {
    f: Arc<dyn Fn(A) -> Result<R>>,
    /// The API that made it, for the error on a `ShapeDtypeStruct` argument.
    api: &'static str,
}

impl<A, R> Clone for ShardMapped<A, R> {
    fn clone(&self) -> Self {
        ShardMapped { f: self.f.clone(), api: self.api }
    }
}

impl<A: Pytree, R: Pytree> ShardMapped<A, R> {
    /// Wraps `f` (a transformation made by `api`) for `.call`.
    pub(crate) fn new(api: &'static str, f: impl Fn(A) -> Result<R> + 'static) -> Self {
        ShardMapped { f: Arc::new(f), api }
    }

    /// Runs the mapped function on `args`. Errors: a `ShapeDtypeStruct` argument
    /// (`TypeError`); see [`shard_map_with`].
    pub fn call<X: crate::trace::pytree::Args<A>>(&self, args: X) -> Result<R> {
        let mut flat = Flat::default();
        args.flatten_args(&mut flat);
        let leaves: Vec<Array> = flat
            .leaves
            .iter()
            .map(|l| match l {
                ArgLeaf::Value(a) => Ok(a.clone()),
                ArgLeaf::Spec(_) => Err(Error::type_error(format!("{} needs array arguments, not ShapeDtypeStructs", self.api))),
            })
            .collect::<Result<_>>()?;
        let a = unflatten_like::<A>(&flat.treedef, leaves, flat.statics)?;
        (self.f)(a)
    }
}

/// `jax.shard_map(f, mesh=mesh, in_specs=.., out_specs=..)` with `check_vma=True`: see
/// [`shard_map_with`].
#[track_caller]
pub fn shard_map<A: Pytree, O: TraceOutput, F: Fn(A) -> O + 'static>(
    f: F,
    mesh: Option<&Mesh>,
    in_specs: impl Into<Specs>,
    out_specs: impl Into<Specs>,
) -> ShardMapped<A, O::Out> {
    shard_map_with(f, mesh, in_specs, out_specs, true)
}

/// `jax.shard_map(f, mesh=mesh, in_specs=.., out_specs=.., check_vma=check_vma)`: `f` runs
/// once per device of `mesh` (`None`: the mesh of `set_mesh` at call time) on that
/// device's block of each argument leaf (block shape: each dimension divided by the sizes
/// of the mesh axes its spec entry names) and may call the collectives of `lax` (`psum`,
/// `all_gather`, ...) over the mesh axes. Each result leaf's blocks are put together by its
/// out_spec: a dimension naming axes is the concatenation of the devices' blocks along
/// them; an axis no dimension names means the result is the same on every device along it
/// (checked when `check_vma`, else the first device's value is taken).
///
/// Errors (`ValueError`, at call time): no mesh; a spec naming an axis the mesh lacks or
/// longer than the argument's rank; a dimension not divisible by its axes' sizes; on a
/// mesh whose axes are all `Explicit`, an argument not already split as its in_spec says
/// (JAX 0.10.2's rule: `reshard` it first, or use an `Auto` mesh); a
/// specs count that does not match the leaves; with `check_vma`, an out_spec that asserts
/// replication the body does not guarantee (JAX's message).
#[track_caller]
pub fn shard_map_with<A: Pytree, O: TraceOutput, F: Fn(A) -> O + 'static>(
    f: F,
    mesh: Option<&Mesh>,
    in_specs: impl Into<Specs>,
    out_specs: impl Into<Specs>,
    check_vma: bool,
) -> ShardMapped<A, O::Out> {
    let loc = Location::caller();
    let mesh = mesh.cloned();
    let (in_specs, out_specs) = (in_specs.into(), out_specs.into());
    let name = super::callbacks::callback_name::<F>();
    let run = move |a: A| -> Result<O::Out> {
        let mesh = mesh.clone().or_else(get_mesh).ok_or_else(|| {
            Error::value_error(format!(
                "shard_map applied to the function '{name}' needs a mesh: pass Some(&mesh) or call set_mesh(&mesh) first"
            ))
        })?;
        let mut flat = Flat::default();
        a.flatten(&mut flat);
        let leaves: Vec<Array> = flat
            .leaves
            .iter()
            .map(|l| match l {
                ArgLeaf::Value(a) => Ok(a.clone()),
                ArgLeaf::Spec(_) => Err(Error::type_error("shard_map needs array arguments, not ShapeDtypeStructs")),
            })
            .collect::<Result<_>>()?;
        let ins = broadcast(&in_specs, leaves.len(), "in_specs", &name)?;
        let mut block_avals = Vec::with_capacity(leaves.len());
        for (i, (x, spec)) in leaves.iter().zip(&ins).enumerate() {
            block_avals.push(block_aval(&mesh, spec, &x.aval(), &name, i)?);
        }
        check_explicit_args(&mesh, &ins, &leaves)?;
        let axes: Vec<(String, usize)> = mesh.axis_names().iter().cloned().zip(mesh.axis_sizes().iter().copied()).collect();
        let mut out_flat = Flat::default();
        let traced = {
            let _env = crate::lax::parallel::bind_axes(&axes);
            // Inside the body every mesh axis is `Manual` (`get_abstract_mesh()`).
            let manual = mesh.with_axis_types(&vec![crate::sharding::AxisType::Manual; mesh.axis_names().len()])?;
            let _scope = crate::sharding_axes::ScopeGuard::push(&manual);
            trace_to_jaxpr("shard_map", &block_avals, |tracers| {
                let _body = enter_body(&mesh, &ins, check_vma);
                let a = unflatten_like::<A>(&flat.treedef, tracers, flat.statics.clone())?;
                let r = f(a).into_result()?;
                out_flat = flatten_value(&r);
                out_flat
                    .leaves
                    .iter()
                    .map(|l| match l {
                        ArgLeaf::Value(a) => Ok(a.clone()),
                        ArgLeaf::Spec(_) => Err(Error::type_error("shard_map outputs must be arrays")),
                    })
                    .collect()
            })?
        };
        let mut jaxpr = traced.jaxpr;
        // Constants of the body become leading operands, replicated (`P()`).
        let nconst = jaxpr.constvars.len();
        let mut invars = std::mem::take(&mut jaxpr.constvars);
        invars.append(&mut jaxpr.invars);
        jaxpr.invars = invars;
        let mut specs = vec![PartitionSpec::default(); nconst];
        specs.extend(ins);
        let outs = broadcast(&out_specs, jaxpr.outvars.len(), "out_specs", &name)?;
        for (k, (o, spec)) in jaxpr.outvars.iter().zip(&outs).enumerate() {
            check_spec(&mesh, spec, &o.aval(), &name, &format!("out_specs[{k}]"), outs.len())?;
        }
        if check_vma {
            check_replication(&jaxpr, &specs, &outs, &mesh, &name)?;
            let masks: Vec<Vma> = specs.iter().map(|s| spec_mask(&mesh, s)).collect();
            let out_masks: Vec<Vma> = outs.iter().map(|s| spec_mask(&mesh, s)).collect();
            jaxpr = insert_pvary(jaxpr, &masks, &out_masks, &mesh);
        }
        let params = ShardMapParams { jaxpr, mesh, in_specs: specs, out_specs: outs, check_vma, name: name.clone() };
        let results = if crate::magic::capturing() && !crate::trace::is_tracing() {
            // A magic (`%jaxpr`, `%lower`, `%compile`) inspects a bare shard_map call as
            // the jitted call of it (JAX's `jit(shard_map(f)).lower(...)`).
            let consts = traced.consts;
            let f = super::jit::jit(move |xs: Vec<Array>| -> Result<Vec<Array>> {
                let ops: Vec<Operand> = consts.iter().cloned().chain(xs).map(Operand::Array).collect();
                bind(Primitive::ShardMap(Box::new(params.clone())), ops, loc)
            })
            .with_name(&name);
            f.call(leaves)?
        } else {
            let ops: Vec<Operand> = traced.consts.into_iter().chain(leaves).map(Operand::Array).collect();
            bind(Primitive::ShardMap(Box::new(params)), ops, loc)?
        };
        unflatten_like::<O::Out>(&out_flat.treedef, results, out_flat.statics)
    };
    ShardMapped::new("shard_map", run)
}

/// `specs` for `n` leaves: one per leaf, or one repeated.
fn broadcast(specs: &Specs, n: usize, what: &str, name: &str) -> Result<Vec<PartitionSpec>> {
    match specs.0.len() {
        k if k == n => Ok(specs.0.clone()),
        1 => Ok(vec![specs.0[0].clone(); n]),
        k => Err(Error::value_error(format!(
            "shard_map applied to the function '{name}' was given {k} {what} for {n} array leaves: give one PartitionSpec per leaf, or one for all"
        ))),
    }
}

fn mesh_text(mesh: &Mesh) -> String {
    format!(
        "The mesh given has shape {} with corresponding axis names {}.",
        crate::ir::pretty::py_tuple(mesh.axis_sizes()),
        crate::ir::parallel::names_tuple(mesh.axis_names())
    )
}

/// Checks that `spec` names only axes of `mesh`, each once, and fits the rank of `aval`
/// (`what` is `in_specs[i]` or `out_specs[k]`; `nouts` the number of outputs, for JAX's
/// `f(*args)[k]` naming of an output).
fn check_spec(mesh: &Mesh, spec: &PartitionSpec, aval: &ShapedArray, name: &str, what: &str, nouts: usize) -> Result<()> {
    let ndim = aval.ndim();
    let mut seen: Vec<&String> = vec![];
    for e in &spec.0 {
        for a in &e.0 {
            if mesh.axis_size(a).is_none() {
                return Err(Error::value_error(format!(
                    "Resource axis: {a} of {spec:?} is not found in mesh: {}. ({what} of shard_map applied to the function '{name}'; {})",
                    crate::ir::parallel::names_tuple(mesh.axis_names()),
                    mesh_text(mesh)
                )));
            }
            if seen.contains(&a) {
                return Err(Error::value_error(format!("{what} {spec:?} of shard_map uses mesh axis '{a}' twice")));
            }
            seen.push(a);
        }
    }
    if spec.0.len() > ndim {
        // JAX 0.10.2's text (it also names the Python parameter, which Rust closures lack).
        let k = spec.0.len();
        let index: String = what.chars().filter(char::is_ascii_digit).collect();
        let (specs, side, value, whose) = if what.starts_with("in_specs") {
            ("in_specs", "input", format!("the passed args[{index}]"), "inputs")
        } else if nouts > 1 {
            ("out_specs", "output", format!("{name}(*args)[{index}]"), "outputs")
        } else {
            ("out_specs", "output", format!("{name}(*args)"), "outputs")
        };
        return Err(Error::value_error(format!(
            "shard_map applied to the function '{name}' was given an {specs} entry which is too long to be compatible with the corresponding {side} value from the function:\n\n\
             {specs} is {spec:?} which has length {k}, but {value} has shape {}, which has rank {ndim} (and {ndim} < {k})\n\n\
             Entries in {specs} must be of length no greater than the number of axes in the corresponding {side} value.\n\n\
             Either revise the spec to be shorter, or modify '{name}' so that its {whose} have sufficient rank.",
            aval.long()
        )));
    }
    Ok(())
}

/// JAX 0.10.2's rule for a mesh whose axes are all `Explicit` (`make_mesh`'s default):
/// each argument must already be split as its in_spec says (its type's spec, padded with
/// `None` to its rank, equals the in_spec padded so), as explicit mode moves no data
/// behind the user's back; an uncommitted or replicated argument has spec `P(None, ..)`.
/// Errors: JAX's `ValueError` "in_specs passed to shard_map: P('X', None) does not match
/// the specs of the input: P('X', 'Y') for arg: float32[8@X,4@Y]. ...", with the fix
/// (`reshard` the argument first) in this API's terms.
fn check_explicit_args(mesh: &Mesh, ins: &[PartitionSpec], leaves: &[Array]) -> Result<()> {
    use crate::sharding::{AxisType, PEntry};
    if !mesh.axis_types().iter().all(|t| *t == AxisType::Explicit) {
        return Ok(());
    }
    let padded = |entries: Vec<PEntry>, ndim: usize| {
        let mut e = entries;
        e.resize(ndim.max(e.len()), PEntry(vec![]));
        PartitionSpec(e)
    };
    for (x, spec) in leaves.iter().zip(ins) {
        let ndim = x.ndim();
        let want = padded(spec.0.clone(), ndim);
        // The argument's type: its split over the Explicit axes of its own mesh.
        let have: Vec<PEntry> = match crate::sharding::value_type(x).and_then(|t| t.sharding) {
            Some(s) => s.spec.0.iter().map(|e| PEntry(e.0.iter().filter(|a| s.mesh.axis_type(a) == Some(AxisType::Explicit)).cloned().collect())).collect(),
            None => vec![],
        };
        let have = padded(have, ndim);
        if want != have {
            return Err(Error::value_error(format!(
                "in_specs passed to shard_map: {want:?} does not match the specs of the input: {have:?} for arg: {}. On a mesh whose \
                 axes are all Explicit, shard_map takes each argument already split as its in_spec says. If you want to reshard \
                 your inputs, you can use `reshard` on the arguments and then pass those args to shard_map (or use a mesh with \
                 Auto axes, where shard_map moves the data itself).",
                crate::sharding::typeof_(x)
            )));
        }
    }
    Ok(())
}

/// The per-device block type of an argument of type `aval` split by `spec`.
fn block_aval(mesh: &Mesh, spec: &PartitionSpec, aval: &ShapedArray, name: &str, i: usize) -> Result<ShapedArray> {
    check_spec(mesh, spec, aval, name, &format!("in_specs[{i}]"), 0)?;
    let mut b = aval.clone();
    for (d, n) in b.shape.iter_mut().enumerate() {
        let axes = spec.axes(d);
        let parts: usize = axes.iter().map(|a| mesh.axis_size(a).unwrap_or(1)).product();
        if *n % parts != 0 {
            let names: Vec<String> = axes.iter().map(|a| format!("'{a}'")).collect();
            return Err(Error::value_error(format!(
                "shard_map applied to the function '{name}' was given argument arrays with axis sizes that are not evenly divisible by the corresponding mesh axis sizes:\n\n{}\n\n* args[{i}] of shape {}, corresponds to in_specs[{i}] of value {spec:?}, which maps array axis {d} (of size {n}) to mesh axis {} (of size {parts}), but {parts} does not evenly divide {n}\n\nArray arguments' axis sizes must be evenly divisible by the mesh axis or axes indicated by the corresponding elements of the argument's in_specs entry. Consider checking that in_specs are correct, and if so consider changing the mesh axis sizes or else padding the input and adapting '{name}' appropriately.",
                mesh_text(mesh),
                aval.short(),
                names.join(", "),
            )));
        }
        *n /= parts;
    }
    Ok(b)
}

/// The global type of a result whose per-device block is `block`, assembled by `spec`.
fn global_aval(mesh: &Mesh, spec: &PartitionSpec, block: &ShapedArray) -> ShapedArray {
    let mut g = block.strong();
    for (d, n) in g.shape.iter_mut().enumerate() {
        *n *= spec.axes(d).iter().map(|a| mesh.axis_size(a).unwrap_or(1)).product::<usize>();
    }
    g
}

/// The type rule of a `shard_map` equation: operands must have the global types the
/// body's blocks come from; results are the body's blocks assembled by the out_specs.
pub fn abstract_eval(p: &ShardMapParams, ins: &[ShapedArray]) -> Result<Vec<ShapedArray>> {
    if ins.len() != p.jaxpr.invars.len() || ins.len() != p.in_specs.len() {
        return Err(Error::type_error(format!("shard_map: expected {} operands, got {}", p.jaxpr.invars.len(), ins.len())));
    }
    for (i, ((a, v), spec)) in ins.iter().zip(&p.jaxpr.invars).zip(&p.in_specs).enumerate() {
        let b = block_aval(&p.mesh, spec, a, &p.name, i)?;
        if b.shape != v.aval.shape || b.dtype != v.aval.dtype {
            return Err(Error::type_error(format!("shard_map: operand {i} of type {} gives blocks {} but the body takes {}", a.short(), b.short(), v.aval.short())));
        }
    }
    Ok(p.jaxpr.outvars.iter().zip(&p.out_specs).map(|(o, s)| global_aval(&p.mesh, s, o.aval())).collect())
}

// ---------------------------------------------------------------- replication check

/// Bit set of mesh axes (by index) a value varies over.
type Vma = u64;

thread_local! {
    /// The `shard_map` bodies being traced on this thread, and the loop and `cond` bodies
    /// traced inside them (innermost last): the trace's id, the mesh, the varying axes of
    /// the trace's arguments (a body's from its in_specs, a loop body's from its operands)
    /// and `check_vma`.
    static BODIES: std::cell::RefCell<Vec<(u64, Mesh, Vec<Vma>, bool)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Pops the body `enter_body` pushed.
pub(crate) struct BodyGuard;

impl Drop for BodyGuard {
    fn drop(&mut self) {
        BODIES.with(|b| {
            b.borrow_mut().pop();
        });
    }
}

/// Marks the innermost trace as a `shard_map` body on `mesh` with arguments split as `specs`
/// (until the guard drops).
fn enter_body(mesh: &Mesh, specs: &[PartitionSpec], check_vma: bool) -> BodyGuard {
    let id = crate::trace::innermost_trace_id().unwrap_or(0);
    let ins = specs.iter().map(|s| spec_mask(mesh, s)).collect();
    BODIES.with(|b| b.borrow_mut().push((id, mesh.clone(), ins, check_vma)));
    BodyGuard
}

/// Marks the innermost trace, a loop or `cond` body being traced directly inside a
/// `shard_map` body (or inside such a loop body), as one more scope of varying axes: its
/// argument `i` varies over `arg_axes[i]` (its operand's axes), so values traced in it
/// have their varying axes (`typeof_`, the loop checks of bodies nested in it). `None` (and
/// nothing marked) elsewhere.
pub(crate) fn enter_nested(arg_axes: &[Vec<String>]) -> Option<BodyGuard> {
    let id = crate::trace::innermost_trace_id()?;
    let parent = crate::trace::parent_trace_id()?;
    let (mesh, check) = BODIES.with(|b| b.borrow().iter().rev().find(|(i, ..)| *i == parent).map(|(_, m, _, c)| (m.clone(), *c)))?;
    let ins = arg_axes.iter().map(|a| axes_mask(&mesh, a)).collect();
    BODIES.with(|b| b.borrow_mut().push((id, mesh, ins, check)));
    Some(BodyGuard)
}

/// The varying axes of `t`, a value of a trace marked by `enter_body`/`enter_nested`:
/// the mesh, the axes as a bit set, and `check_vma`. Values the trace closed over have
/// those of the trace they come from (none for a trace not marked, e.g. constants).
fn tracer_vma(t: &crate::trace::Tracer) -> Option<(Mesh, Vma, bool)> {
    // The marked traces first: cheap, and nothing to do outside a body (no jaxpr copied).
    let (mesh, ins, check) = BODIES.with(|b| b.borrow().iter().rev().find(|(i, ..)| *i == t.trace_id).map(|(_, m, s, c)| (m.clone(), s.clone(), *c)))?;
    let (id, j) = crate::trace::partial_jaxpr(t)?;
    if ins.len() != j.invars.len() {
        return None;
    }
    let consts = const_vmas(id);
    let vma = vma_env(&j, &ins, &consts, &mesh);
    let vma = match j.outvars.first() {
        Some(Atom::Var(v)) => vma.get(&v.id).copied().unwrap_or(0),
        _ => 0,
    };
    Some((mesh, vma, check))
}

/// The varying axes of the values trace `id` closed over (its constvars, in order).
fn const_vmas(id: u64) -> Vec<Vma> {
    crate::trace::trace_consts(id)
        .unwrap_or_default()
        .iter()
        .map(|a| match &a.0 {
            crate::trace::array::Repr::Tracer(t) if t.trace_id != id => tracer_vma(t).map(|(_, m, _)| m).unwrap_or(0),
            _ => 0,
        })
        .collect()
}

/// For `t`, a value of a `shard_map` body being traced (not of a trace nested in it): the
/// body's mesh, the mesh axes `t` varies over (in mesh order; see [`output_vma`]) and
/// the body's `check_vma`. `None`: `t` is not such a value.
fn body_varying(t: &crate::trace::Tracer) -> Option<(Mesh, Vec<String>, bool)> {
    let (mesh, vma, check) = tracer_vma(t)?;
    let names = mesh.axis_names();
    let varying: Vec<String> = (0..names.len()).filter(|k| vma & (1 << k) != 0).map(|k| names[k].clone()).collect();
    Some((mesh, varying, check))
}

/// The mesh axes `t`, a value of a `shard_map` body traced with `check_vma`, varies over
/// (what `typeof_` shows as `{V:X}`); `None` outside such a body (or with `check_vma`
/// off, where JAX tracks no varying axes).
pub(crate) fn body_vma(t: &crate::trace::Tracer) -> Option<Vec<String>> {
    body_varying(t).filter(|(_, _, check)| *check).map(|(_, v, _)| v)
}

/// `debug::visualize_array_sharding` of `t`, a value of a `shard_map` body being traced (not
/// of a trace nested in it): the mesh's devices each holding a block of `t`'s type, titled
/// with the mesh axes it varies over (JAX's varying manual axes of the body traced so far:
/// its arguments vary over their in_specs' axes, `psum`/`pmax`/`pmin` make a value
/// invariant along their axes, other collectives make it vary). `None`: `t` is not such a
/// value.
pub(crate) fn body_view(t: &crate::trace::Tracer) -> Option<Result<crate::display::sharding_view::ShardingView>> {
    let (mesh, varying, _) = body_varying(t)?;
    Some(Ok(crate::sharding::visualize_body_block(&t.var.aval, &mesh, &varying)))
}

fn axes_mask(mesh: &Mesh, axes: &[String]) -> Vma {
    axes.iter().filter_map(|a| mesh.axis_names().iter().position(|n| n == a)).fold(0, |m, k| m | (1 << k))
}

pub(crate) fn spec_mask(mesh: &Mesh, spec: &PartitionSpec) -> Vma {
    spec.0.iter().fold(0, |m, e| m | axes_mask(mesh, &e.0))
}

/// The axes each output of `j` varies over, given those of its inputs (JAX's varying
/// manual axes: reductions over an axis make a value invariant along it; `axis_index`,
/// `pvary` and the other collectives make it vary; a loop's carries vary where their
/// initial values or the body make them (a fixed point), its stacked results where the
/// body's do; a `cond`'s results where a branch's or the predicate does; any other
/// equation varies where an operand does).
pub(crate) fn output_vma(j: &Jaxpr, ins: &[Vma], mesh: &Mesh) -> Vec<Vma> {
    let env = vma_env(j, ins, &[], mesh);
    j.outvars
        .iter()
        .map(|a| match a {
            Atom::Var(v) => env.get(&v.id).copied().unwrap_or(0),
            Atom::Lit(_) => 0,
        })
        .collect()
}

/// The varying axes of every variable of `j` (invars, constvars, equation outputs; see
/// [`output_vma`]) by variable id.
/// `consts[i]` is constvar i's (missing ones: none).
fn vma_env(j: &Jaxpr, ins: &[Vma], consts: &[Vma], mesh: &Mesh) -> std::collections::HashMap<u32, Vma> {
    let mut env: std::collections::HashMap<u32, Vma> = j.invars.iter().zip(ins).map(|(v, m)| (v.id, *m)).collect();
    for (k, v) in j.constvars.iter().enumerate() {
        env.insert(v.id, consts.get(k).copied().unwrap_or(0));
    }
    let get = |env: &std::collections::HashMap<u32, Vma>, a: &Atom| match a {
        Atom::Var(v) => env.get(&v.id).copied().unwrap_or(0),
        Atom::Lit(_) => 0,
    };
    for e in &j.eqns {
        let eins: Vec<Vma> = e.inputs.iter().map(|a| get(&env, a)).collect();
        let union = eins.iter().fold(0, |m, v| m | v);
        let outs: Vec<Vma> = match &e.primitive {
            Primitive::Collective(c @ (Collective::Psum { .. } | Collective::Pmax { .. } | Collective::Pmin { .. })) => {
                vec![union & !axes_mask(mesh, c.axes()); e.outputs.len()]
            }
            Primitive::Collective(c) => vec![union | axes_mask(mesh, c.axes()); e.outputs.len()],
            Primitive::Scan { jaxpr, num_consts, num_carry, .. } if eins.len() == jaxpr.invars.len() => {
                let (nc, nk) = (*num_consts, *num_carry);
                let body_in = scan_body_ins(jaxpr, &eins, nc, nk, mesh);
                let outs = output_vma(jaxpr, &body_in, mesh);
                body_in[nc..nc + nk].iter().chain(&outs[nk..]).copied().collect()
            }
            Primitive::While { body_jaxpr, cond_nconsts, body_nconsts, .. } if eins.len() == cond_nconsts + body_jaxpr.invars.len() => {
                while_body_ins(body_jaxpr, &eins[*cond_nconsts..], *body_nconsts, mesh)[*body_nconsts..].to_vec()
            }
            Primitive::Cond { branches } if !eins.is_empty() && branches.iter().all(|b| b.invars.len() == eins.len() - 1) => {
                let mut outs = vec![eins[0]; e.outputs.len()];
                for b in branches {
                    for (o, v) in outs.iter_mut().zip(output_vma(b, &eins[1..], mesh)) {
                        *o |= v;
                    }
                }
                outs
            }
            _ => vec![union; e.outputs.len()],
        };
        for (o, v) in e.outputs.iter().zip(outs) {
            env.insert(o.id, v);
        }
    }
    env
}

/// JAX's implicit `pvary` (`core.standard_insert_pvary`; JAX's shard_map page, "scan-vma"
/// and the VMA table) in body `j` of a `shard_map` traced with `check_vma`, its arguments
/// varying over `ins` and its results split as `outs` (the out_specs' axes):
/// - an equation whose operands vary over different mesh axes gets, before it,
///   `pvary[axes=(..)]` of each operand (literals included) that misses some of the axes
///   the others vary over, as JAX records it: `f:f32[3]{V:i} = pvary[axes=('i',)] e`
///   before `mul d f`, `d:f32[]{V:i} = pvary[axes=('i',)] 2.0:f32[]` before `mul c d`;
/// - a collective's operand that does not vary over all of the collective's axes is made
///   to (JAX's collectives take varying operands: `psum` of an invariant value sums one
///   copy per device);
/// - a result that varies over fewer axes than its out_spec splits it over ends in a
///   `pvary` over the rest.
///
/// The missing axes are listed in mesh order. The value is unchanged (`pvary` lowers to its
/// operand); under `grad` its transpose is `psum`, so an invariant value's cotangent is
/// summed over the devices that used it (`grad` of `psum(e)` over 2 devices is 2, as in
/// JAX). Loops, `cond` and nested `shard_map`s, and equations inside their bodies, are
/// left as they are.
fn insert_pvary(mut j: Jaxpr, ins: &[Vma], outs: &[Vma], mesh: &Mesh) -> Jaxpr {
    let mut env = vma_env(&j, ins, &[], mesh);
    let names = mesh.axis_names();
    let mut next = crate::lax::control::max_id(&j) + 1;
    let mut eqns = Vec::with_capacity(j.eqns.len());
    let vma_of = |env: &std::collections::HashMap<u32, Vma>, a: &Atom| match a {
        Atom::Var(v) => env.get(&v.id).copied().unwrap_or(0),
        Atom::Lit(_) => 0,
    };
    // `pvary` of `a` (varying over `vma`) so that it varies over `want` too; the new atom.
    let mut pvary = |a: &Atom, vma: Vma, want: Vma, env: &mut std::collections::HashMap<u32, Vma>, eqns: &mut Vec<crate::ir::Eqn>, like: Option<&crate::ir::Eqn>| -> Option<Atom> {
        let missing = want & !vma;
        if missing == 0 {
            return None;
        }
        let axes: Vec<String> = (0..names.len()).filter(|k| missing & (1 << k) != 0).map(|k| names[k].clone()).collect();
        let out = crate::ir::Var { id: next, aval: a.aval().clone() };
        next += 1;
        env.insert(out.id, vma | missing);
        eqns.push(crate::ir::Eqn {
            primitive: Primitive::Collective(Collective::Pvary { axes }),
            inputs: vec![a.clone()],
            outputs: vec![out.clone()],
            source: like.and_then(|e| e.source.clone()),
            name_stack: like.and_then(|e| e.name_stack.clone()),
            metadata: like.and_then(|e| e.metadata.clone()),
        });
        Some(Atom::Var(out))
    };
    for mut e in std::mem::take(&mut j.eqns) {
        let want: Option<Vma> = match &e.primitive {
            Primitive::Collective(Collective::Pvary { .. } | Collective::AxisIndex { .. }) => None,
            Primitive::Collective(c) => Some(axes_mask(mesh, c.axes())),
            p if p.sub_jaxprs().is_empty() => Some(e.inputs.iter().fold(0, |m, a| m | vma_of(&env, a))),
            _ => None,
        };
        if let Some(want) = want {
            let like = e.clone();
            for k in 0..e.inputs.len() {
                let vma = vma_of(&env, &e.inputs[k]);
                if let Some(a) = pvary(&e.inputs[k], vma, want, &mut env, &mut eqns, Some(&like)) {
                    e.inputs[k] = a;
                }
            }
        }
        eqns.push(e);
    }
    for k in 0..j.outvars.len().min(outs.len()) {
        let vma = vma_of(&env, &j.outvars[k]);
        if let Some(a) = pvary(&j.outvars[k], vma, outs[k], &mut env, &mut eqns, None) {
            j.outvars[k] = a;
        }
    }
    j.eqns = eqns;
    j
}

/// The varying axes of a scan body's arguments (consts, carries, xs) given the scan's
/// operands' `eins`: a carry varies where its initial value or the body's result for it
/// does (iterated to a fixed point).
fn scan_body_ins(jaxpr: &Jaxpr, eins: &[Vma], nc: usize, nk: usize, mesh: &Mesh) -> Vec<Vma> {
    let mut body_in = eins.to_vec();
    for _ in 0..=nk {
        let outs = output_vma(jaxpr, &body_in, mesh);
        let grown: Vec<Vma> = (0..nk).map(|k| body_in[nc + k] | outs[k]).collect();
        if grown == body_in[nc..nc + nk] {
            break;
        }
        body_in[nc..nc + nk].copy_from_slice(&grown);
    }
    body_in
}

/// The varying axes of a while_loop body's arguments (its `bc` consts, then the carries)
/// given `ins` (the same, from the operands), as [`scan_body_ins`].
fn while_body_ins(body: &Jaxpr, ins: &[Vma], bc: usize, mesh: &Mesh) -> Vec<Vma> {
    let mut body_in = ins.to_vec();
    for _ in 0..=body_in.len() {
        let outs = output_vma(body, &body_in, mesh);
        let grown: Vec<Vma> = body_in[bc..].iter().zip(&outs).map(|(a, b)| a | b).collect();
        if grown == body_in[bc..] {
            break;
        }
        body_in[bc..].copy_from_slice(&grown);
    }
    body_in
}

/// For the jaxpr printer: the variables of `p`'s body, and of the loop and `cond` bodies
/// in it, that vary over mesh axes: the address of the jaxpr each belongs to, the variable
/// and its axes in mesh order, as JAX prints them after the type (`c:f32[3]{V:i}`). Empty
/// with `check_vma` off.
pub(crate) fn body_var_vmas(p: &ShardMapParams) -> Vec<(usize, crate::ir::Var, Vec<String>)> {
    if !p.check_vma || p.in_specs.len() != p.jaxpr.invars.len() {
        return vec![];
    }
    let ins: Vec<Vma> = p.in_specs.iter().map(|s| spec_mask(&p.mesh, s)).collect();
    let mut out = vec![];
    annotate(&p.jaxpr, &ins, &p.mesh, &mut out);
    out
}

/// [`body_var_vmas`] of `j` whose invars vary over `ins`, then of its sub-jaxprs.
fn annotate(j: &Jaxpr, ins: &[Vma], mesh: &Mesh, out: &mut Vec<(usize, crate::ir::Var, Vec<String>)>) {
    let env = vma_env(j, ins, &[], mesh);
    let names = mesh.axis_names();
    let at = j as *const Jaxpr as usize;
    for v in j.invars.iter().chain(j.eqns.iter().flat_map(|e| e.outputs.iter())) {
        let m = env.get(&v.id).copied().unwrap_or(0);
        if m != 0 {
            out.push((at, v.clone(), (0..names.len()).filter(|k| m & (1 << k) != 0).map(|k| names[k].clone()).collect()));
        }
    }
    let get = |a: &Atom| match a {
        Atom::Var(v) => env.get(&v.id).copied().unwrap_or(0),
        Atom::Lit(_) => 0,
    };
    for e in &j.eqns {
        let eins: Vec<Vma> = e.inputs.iter().map(get).collect();
        match &e.primitive {
            Primitive::Scan { jaxpr, num_consts, num_carry, .. } if eins.len() == jaxpr.invars.len() => {
                annotate(jaxpr, &scan_body_ins(jaxpr, &eins, *num_consts, *num_carry, mesh), mesh, out);
            }
            Primitive::While { cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts } if eins.len() == cond_nconsts + body_jaxpr.invars.len() => {
                let body_in = while_body_ins(body_jaxpr, &eins[*cond_nconsts..], *body_nconsts, mesh);
                let mut cond_in = eins[..*cond_nconsts].to_vec();
                cond_in.extend_from_slice(&body_in[*body_nconsts..]);
                annotate(body_jaxpr, &body_in, mesh, out);
                if cond_in.len() == cond_jaxpr.invars.len() {
                    annotate(cond_jaxpr, &cond_in, mesh, out);
                }
            }
            Primitive::Cond { branches } if !eins.is_empty() => {
                for b in branches.iter().filter(|b| b.invars.len() == eins.len() - 1) {
                    annotate(b, &eins[1..], mesh, out);
                }
            }
            _ => {}
        }
    }
}

/// The `shard_map` body the innermost trace on this thread belongs to (not a trace nested
/// in it): its trace id, mesh, in_specs and check_vma.
fn innermost_body() -> Option<(u64, Mesh, Vec<Vma>, bool)> {
    let id = crate::trace::innermost_trace_id()?;
    BODIES.with(|b| b.borrow().last().filter(|(i, ..)| *i == id).cloned())
}

/// For `x` used in a `shard_map` body: whether the body checks varying axes, and the mesh
/// axes `x` varies over (none for a value that is not the body's, e.g. a constant).
/// `None`: not in a body, or in a trace nested in one (a loop body) for a value of that
/// nested trace.
pub(crate) fn vma_of(x: &Array) -> Option<(bool, Vec<String>)> {
    if let crate::trace::array::Repr::Tracer(t) = &x.0
        && let Some((_, v, check)) = body_varying(t)
    {
        return Some((check, v));
    }
    innermost_body().map(|(_, _, _, check)| (check, vec![]))
}

/// Which loop or branch a [`check_control_vma`] checks, for its error text.
pub(crate) enum ControlKind {
    /// `lax.scan` (`fori`: a `fori_loop`, whose carry leaf 0 is the loop index).
    Scan { fori: bool },
    WhileLoop,
    /// `lax.cond`/`lax.switch`.
    Cond,
}

/// JAX's varying-axes check of a loop or `cond` traced in a `shard_map` body with
/// `check_vma` (its bind, `prim` on `operands`, comes next): a loop carry must vary over
/// the same mesh axes coming out of the body as going in, and every branch of a `cond` must
/// give results varying over the same axes. Nothing is checked outside such a body.
/// Errors: JAX 0.10.2's `TypeError` texts, with its `pcast` hint (for a `cond`, the hint
/// names the branch whose result needs `pcast` and the axes).
pub(crate) fn check_control_vma(prim: &Primitive, operands: &[Operand], kind: ControlKind) -> Result<()> {
    let Some((id, mesh, arg_vmas, true)) = innermost_body() else { return Ok(()) };
    let ins = operand_vmas(id, &mesh, &arg_vmas, operands);
    let names = mesh.axis_names();
    let axes_of = |m: Vma| -> Vec<String> { (0..names.len()).filter(|k| m & (1 << k) != 0).map(|k| names[k].clone()).collect() };
    let ty = |a: &ShapedArray, m: Vma| crate::sharding::ArrayType { aval: a.clone(), sharding: None, memory_kind: crate::runtime::memory_kind::MemoryKind::Device, vma: axes_of(m) }.to_string();
    let (what, avals, carry_in, carry_out): (&str, Vec<ShapedArray>, Vec<Vma>, Vec<Vma>) = match prim {
        Primitive::Scan { jaxpr, num_consts, num_carry, .. } if ins.len() == jaxpr.invars.len() => {
            let outs = output_vma(jaxpr, &ins, &mesh);
            let (nc, nk) = (*num_consts, *num_carry);
            ("scan body", jaxpr.invars[nc..nc + nk].iter().map(|v| v.aval.clone()).collect(), ins[nc..nc + nk].to_vec(), outs[..nk].to_vec())
        }
        Primitive::While { body_jaxpr, cond_nconsts, body_nconsts, .. } if ins.len() == cond_nconsts + body_jaxpr.invars.len() => {
            let outs = output_vma(body_jaxpr, &ins[*cond_nconsts..], &mesh);
            let carry = ins[cond_nconsts + body_nconsts..].to_vec();
            ("while_loop body", body_jaxpr.invars[*body_nconsts..].iter().map(|v| v.aval.clone()).collect(), carry, outs)
        }
        Primitive::Cond { branches } if !ins.is_empty() && branches.iter().all(|b| b.invars.len() == ins.len() - 1) => {
            return check_branches_vma(branches, &ins[1..], &mesh, &ty, &axes_of);
        }
        _ => return Ok(()),
    };
    let nk = avals.len();
    let fori = matches!(kind, ControlKind::Scan { fori: true });
    let name = |k: usize| -> String {
        if fori {
            if nk == 2 { "loop_carry[1]".to_string() } else { format!("loop_carry[1][{}]", k - 1) }
        } else if nk == 1 {
            String::new()
        } else {
            format!("carry[{k}]")
        }
    };
    let mut diffs = vec![];
    let mut hints = vec![];
    for k in 0..nk {
        let (i, o) = (carry_in[k], carry_out.get(k).copied().unwrap_or(carry_in[k]));
        if i == o {
            continue;
        }
        let component = if name(k).is_empty() { "input carry".to_string() } else { format!("input carry component {}", name(k)) };
        diffs.push(format!(
            "the {component} has type {} but the corresponding output carry component has type {}, so the manual axis types do not match",
            ty(&avals[k], i),
            ty(&avals[k], o)
        ));
        if o & !i != 0 {
            hints.push(format!(
                "This might be fixed by applying `jax.lax.pcast(..., {}, to='varying')`, to the initial carry value corresponding to the {component}.\nSee https://docs.jax.dev/en/latest/notebooks/shard_map.html#scan-vma for more information.\n",
                crate::ir::parallel::names_tuple(&axes_of(o & !i))
            ));
        }
    }
    if diffs.is_empty() {
        return Ok(());
    }
    let hints: String = hints.iter().map(|h| format!("{h}\n")).collect();
    Err(Error::type_error(format!(
        "{what} function carry input and carry output must have equal types, but they differ:\n\n{}\n{hints}Revise the function so that all output types match the corresponding input types.",
        sentences(&diffs)
    )))
}

/// `cond` branches (`branches[0]` is false_fun, `[1]` true_fun; `lax.switch`'s in index
/// order) must give results varying over the same axes.
fn check_branches_vma(
    branches: &[Jaxpr],
    ins: &[Vma],
    mesh: &Mesh,
    ty: &dyn Fn(&ShapedArray, Vma) -> String,
    axes_of: &dyn Fn(Vma) -> Vec<String>,
) -> Result<()> {
    let outs: Vec<Vec<Vma>> = branches.iter().map(|b| output_vma(b, ins, mesh)).collect();
    let label = |b: usize| match (branches.len(), b) {
        (2, 0) => "false_fun".to_string(),
        (2, _) => "true_fun".to_string(),
        (_, b) => format!("branch {b}"),
    };
    let first = if branches.len() == 2 { 1 } else { 0 };
    for (b, o) in outs.iter().enumerate() {
        if b == first {
            continue;
        }
        for (k, (x, y)) in outs[first].iter().zip(o).enumerate() {
            if x == y {
                continue;
            }
            let aval = branches[first].outvars[k].aval();
            let (a, c) = (label(first), label(b));
            // The branch whose result varies over fewer axes needs pcast to the others.
            let (fix, missing) = if y & !x != 0 { (a.clone(), y & !x) } else { (c.clone(), x & !y) };
            return Err(Error::type_error(format!(
                "cond branches must have equal output types but they differ.\n\nThe output of {a} has type {} but the corresponding output of {c} has type {}, so the manual axis types do not match.\n\n\
                 This might be fixed by applying `jax.lax.pcast(..., {}, to='varying')` to the output of {fix}.\n\
                 See https://docs.jax.dev/en/latest/notebooks/shard_map.html#scan-vma for more information.\n\nRevise {a} and/or {c} so that all output types match.",
                ty(aval, *x),
                ty(aval, *y),
                crate::ir::parallel::names_tuple(&axes_of(missing))
            )));
        }
    }
    Ok(())
}

/// One difference as a sentence, several as a bulleted list (JAX's layout).
fn sentences(diffs: &[String]) -> String {
    if diffs.len() == 1 {
        let mut c = diffs[0].chars();
        let first = c.next().map(|f| f.to_uppercase().collect::<String>()).unwrap_or_default();
        return format!("{first}{}.\n", c.as_str());
    }
    let n = diffs.len();
    diffs.iter().enumerate().map(|(k, d)| if k + 1 < n { format!("  * {d};\n") } else { format!("  * {d}.\n") }).collect::<Vec<_>>().join("\n")
}

/// The varying axes of each operand of an equation about to be bound in the body traced
/// as trace `id`: a value of that trace has those its jaxpr so far gives it; anything else
/// (a constant, a literal, a value the body closed over) is invariant.
fn operand_vmas(id: u64, mesh: &Mesh, ins: &[Vma], operands: &[Operand]) -> Vec<Vma> {
    let outs: Vec<Option<crate::trace::Tracer>> = operands
        .iter()
        .map(|o| match o {
            Operand::Array(Array(crate::trace::array::Repr::Tracer(t))) if t.trace_id == id => Some(t.clone()),
            _ => None,
        })
        .collect();
    // A value of an enclosing trace becomes a constant of this one: its own axes.
    let outer = |o: &Operand| match o {
        Operand::Array(Array(crate::trace::array::Repr::Tracer(t))) => tracer_vma(t).map(|(_, m, _)| m).unwrap_or(0),
        _ => 0,
    };
    let vars: Vec<crate::ir::Var> = outs.iter().flatten().map(|t| t.var.clone()).collect();
    let Some(j) = crate::trace::trace_jaxpr_with_outs(id, vars) else { return operands.iter().map(outer).collect() };
    if ins.len() != j.invars.len() {
        return vec![0; operands.len()];
    }
    let env = vma_env(&j, ins, &const_vmas(id), mesh);
    let mut vmas = j.outvars.iter().map(|a| match a {
        Atom::Var(v) => env.get(&v.id).copied().unwrap_or(0),
        Atom::Lit(_) => 0,
    });
    outs.iter().zip(operands).map(|(t, o)| if t.is_some() { vmas.next().unwrap_or(0) } else { outer(o) }).collect()
}

/// JAX's check of out_specs that assert replication (`check_vma`).
fn check_replication(j: &Jaxpr, in_specs: &[PartitionSpec], out_specs: &[PartitionSpec], mesh: &Mesh, name: &str) -> Result<()> {
    let ins: Vec<Vma> = in_specs.iter().map(|s| spec_mask(mesh, s)).collect();
    let outs = output_vma(j, &ins, mesh);
    let names = mesh.axis_names();
    let list = |m: Vma| -> Vec<String> { (0..names.len()).filter(|k| m & (1 << k) != 0).map(|k| format!("'{}'", names[k])).collect() };
    let phrase = |l: &[String]| if l.len() == 1 { format!("mesh axis {}", l[0]) } else { format!("mesh axes ({})", l.join(", ")) };
    for (k, (vma, spec)) in outs.iter().zip(out_specs).enumerate() {
        let all: Vma = (1 << names.len()) - 1;
        let replicated = all & !spec_mask(mesh, spec);
        if vma & replicated == 0 {
            continue;
        }
        let which = if out_specs.len() == 1 { "out_specs".to_string() } else { format!("out_specs[{k}]") };
        let inferred = list(replicated & !vma);
        let inferred = if inferred.is_empty() { "could not infer replication over any axes".to_string() } else { format!("could only infer replication over {}", phrase(&inferred)) };
        return Err(Error::value_error(format!(
            "shard_map applied to the function '{name}' was given out_specs which require replication which can't be statically inferred given the mesh:\n\n{}\n\n{which} is {spec:?} which implies that the corresponding output value is replicated across {}, but {inferred}\n\nCheck if these output values are meant to be replicated over those mesh axes. If not, consider revising the corresponding out_specs entries. If so, consider disabling the check by passing the check_vma=False argument to `jax.shard_map`.",
            mesh_text(mesh),
            phrase(&list(replicated)),
        )));
    }
    Ok(())
}

// ---------------------------------------------------------------- execution

/// JAX's check of the arguments of a computation holding a `shard_map` over `mesh`: an
/// argument committed to a mesh of other devices (sharded over 8 devices into a shard_map
/// over 4) is an error, not a silent move. `arg_name(i)` names input `i`.
/// Errors: JAX 0.10.2's `ValueError: Received incompatible devices for jitted computation.
/// Got argument x of f with shape float32[8@i] and with device ids [0, …, 7] on platform
/// CPU and shard_map inside jit with device ids [0, 1, 2, 3] on platform CPU`.
pub(crate) fn check_arg_devices<'a>(
    mesh: &Mesh,
    inputs: impl Iterator<Item = &'a Arc<DeviceArray>>,
    fun_name: &str,
    arg_name: impl Fn(usize) -> String,
) -> Result<()> {
    let mut want: Vec<u32> = mesh.device_ids().to_vec();
    want.sort_unstable();
    for (i, d) in inputs.enumerate() {
        let Some(sh) = d.sharded_info().filter(|_| d.placement.committed) else { continue };
        let mut have: Vec<u32> = sh.sharding.mesh.device_ids().to_vec();
        have.sort_unstable();
        if have != want {
            return Err(Error::value_error(format!(
                "Received incompatible devices for jitted computation. Got argument {} of {fun_name} with shape {} and with \
                 device ids {:?} on platform CPU and shard_map inside jit with device ids {:?} on platform CPU",
                arg_name(i),
                crate::sharding::type_text(d),
                sh.sharding.mesh.device_ids(),
                mesh.device_ids()
            )));
        }
    }
    Ok(())
}

/// Runs a `shard_map` equation on concrete operands: blocks per device, the body on one
/// thread per device, results assembled as sharded arrays.
/// Errors: an argument committed to other devices (`check_arg_devices`); the first
/// device's error (in mesh order) other than "another device failed".
pub(crate) fn execute(p: &ShardMapParams, inputs: &[Arc<DeviceArray>]) -> Result<Vec<Array>> {
    let mesh = &p.mesh;
    check_arg_devices(mesh, inputs.iter(), &p.name, |i| format!("args[{i}]"))?;
    let n = mesh.size();
    let mut blocks: Vec<Vec<Arc<DeviceArray>>> = Vec::with_capacity(inputs.len());
    for (x, spec) in inputs.iter().zip(&p.in_specs) {
        let ns = NamedSharding::new(mesh, spec.clone())?;
        blocks.push(crate::sharding::shard_blocks(x, &ns)?);
    }
    let run = MeshRun::new(mesh);
    let ids = mesh.device_ids().to_vec();
    let results: Vec<Result<Vec<Array>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|k| {
                let args: Vec<Array> = blocks.iter().map(|b| Array::from_device(b[k].clone())).collect();
                let run = run.clone();
                let jaxpr = &p.jaxpr;
                let id = ids[k];
                std::thread::Builder::new().name(format!("shard_map-cpu{id}")).spawn_scoped(s, move || {
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run.as_device(k, || eval_body(jaxpr, &args))));
                    let r = r.unwrap_or_else(|_| Err(Error::runtime(format!("shard_map: the body panicked on cpu:{id}"))));
                    if r.is_err() {
                        run.poison();
                    }
                    r
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h.join().unwrap_or_else(|_| Err(Error::runtime("shard_map: a device thread panicked"))),
                Err(e) => {
                    run.poison();
                    Err(Error::runtime(format!("shard_map: cannot start a device thread: {e}")))
                }
            })
            .collect()
    });
    let mut per_device = Vec::with_capacity(n);
    let mut first_err: Option<Error> = None;
    for r in results {
        match r {
            Ok(v) => per_device.push(v),
            Err(e) => {
                let secondary = e.message.starts_with("shard_map: another device");
                if first_err.as_ref().is_none_or(|f| f.message.starts_with("shard_map: another device") && !secondary) {
                    first_err = Some(e);
                }
            }
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    let mut outs = Vec::with_capacity(p.out_specs.len());
    for (k, (o, spec)) in p.jaxpr.outvars.iter().zip(&p.out_specs).enumerate() {
        let aval = global_aval(mesh, spec, o.aval());
        let ns = NamedSharding::new(mesh, spec.clone())?;
        let shards: Vec<Arc<DeviceArray>> =
            per_device.iter().map(|v| v[k].device().cloned().ok_or_else(|| Error::runtime("internal: traced value in shard_map result"))).collect::<Result<_>>()?;
        outs.push(Array::from_device(crate::sharding::from_shards(aval, ns, shards)?));
    }
    Ok(outs)
}

/// Evaluates the body on one device's blocks: collectives meet the other devices, debug
/// prints are ordered by device, every other equation is bound eagerly.
fn eval_body(j: &Jaxpr, args: &[Array]) -> Result<Vec<Array>> {
    let loc = Location::caller();
    let mut env: Env<Array> = Env::new();
    for (v, a) in j.invars.iter().zip(args) {
        env.set(v, a.clone());
    }
    for e in &j.eqns {
        // A failing equation's error names its traced line (the user's, e.g. the
        // `pure_callback` call in the body), not this loop's.
        let outs = (|| -> Result<Vec<Array>> { Ok(match &e.primitive {
            Primitive::Collective(c) => {
                let x = match e.inputs.first() {
                    Some(a) => Some(atom_array(&env, a)?),
                    None => None,
                };
                let d = x.as_ref().map(|x| x.device().cloned().ok_or_else(|| Error::runtime("internal: traced collective operand"))).transpose()?;
                vec![Array::from_device(crate::runtime::collectives::run(c, d.as_ref(), &e.outputs[0].aval)?)]
            }
            Primitive::DebugCallback { callback, .. } => {
                let mut bufs = vec![];
                for a in &e.inputs {
                    bufs.push((*atom_array(&env, a)?.buffer()?).clone());
                }
                crate::runtime::collectives::ordered_debug(*callback, bufs)?;
                vec![]
            }
            Primitive::Pjit { jaxpr, .. } => {
                let consts: Vec<Array> = jaxpr.consts.iter().map(|b| Array::from_buffer((**b).clone(), false)).collect();
                let mut ins = consts;
                for a in &e.inputs {
                    ins.push(atom_array(&env, a)?);
                }
                let mut inner = jaxpr.jaxpr.clone();
                let mut iv = std::mem::take(&mut inner.constvars);
                iv.append(&mut inner.invars);
                inner.invars = iv;
                eval_body(&inner, &ins)?
            }
            Primitive::ShardMap(_) => return Err(Error::value_error("shard_map inside shard_map is not supported")),
            p if p.sub_jaxprs().iter().any(|s| has_collective(s)) => {
                return Err(Error::value_error(format!(
                    "collectives inside `{}` in a shard_map body are not supported yet: move the collective out of the {}",
                    p.name(),
                    p.name()
                )))
            }
            p => {
                let ops = e.inputs.iter().map(|a| operand(&env, a)).collect::<Result<Vec<_>>>()?;
                bind(p.clone(), ops, loc)?
            }
        }) })()
        .map_err(|err| err.at(e.source.clone()))?;
        for (v, o) in e.outputs.iter().zip(outs) {
            env.set(v, o);
        }
    }
    j.outvars.iter().map(|a| atom_array(&env, a)).collect()
}

/// Whether `j` (or a jaxpr nested in it) exchanges data between devices: a collective
/// other than `pvary` (a type change that lowers to its operand), or a `shard_map`.
fn has_collective(j: &Jaxpr) -> bool {
    j.eqns.iter().any(|e| {
        matches!(&e.primitive, Primitive::Collective(c) if !matches!(c, Collective::Pvary { .. }))
            || matches!(e.primitive, Primitive::ShardMap(_))
            || e.primitive.sub_jaxprs().iter().any(|s| has_collective(s))
    })
}

/// Whether `j` has a `shard_map` equation (such jaxprs run equation by equation under `jit`).
pub(crate) fn contains_shard_map(j: &Jaxpr) -> bool {
    j.eqns.iter().any(|e| matches!(e.primitive, Primitive::ShardMap(_)) || e.primitive.sub_jaxprs().iter().any(|s| contains_shard_map(s)))
}

// ---------------------------------------------------------------- differentiation

/// JVP rule of a collective: linear collectives apply to the tangent as to the value.
/// Errors: `pmax`/`pmin` (not differentiable here yet).
pub(crate) fn collective_jvp(c: &Collective, t: &Array) -> Result<Array> {
    match c {
        Collective::Pmax { .. } | Collective::Pmin { .. } => {
            Err(Error::type_error(format!("Differentiation rule for '{}' not implemented", c.name())))
        }
        _ => crate::lax::parallel::coll(c.clone(), t),
    }
}

/// Transpose (VJP) of a collective, with JAX's varying-axes semantics: `psum`'s result is
/// the same on every device, so its cotangent passes through unchanged (JAX's `pvary`);
/// `all_gather` ↔ `psum_scatter`, `ppermute` by the inverse permutation, `all_to_all`
/// with split and concat axes swapped.
pub(crate) fn collective_vjp(c: &Collective, ct: &Array) -> Result<Array> {
    let t = match c {
        Collective::Psum { .. } => return Ok(ct.clone()),
        // The value was the same on every device and each device's use of it differs:
        // the cotangents add up (JAX: pvary's transpose is psum).
        Collective::Pvary { axes } => Collective::Psum { axes: axes.clone() },
        Collective::AllGather { axes, axis_size, dimension, tiled } => {
            Collective::ReduceScatter { axes: axes.clone(), axis_size: *axis_size, scatter_dimension: *dimension, tiled: *tiled }
        }
        Collective::ReduceScatter { axes, axis_size, scatter_dimension, tiled } => {
            Collective::AllGather { axes: axes.clone(), axis_size: *axis_size, dimension: *scatter_dimension, tiled: *tiled }
        }
        Collective::Ppermute { axes, perm } => Collective::Ppermute { axes: axes.clone(), perm: perm.iter().map(|&(s, d)| (d, s)).collect() },
        Collective::AllToAll { axes, axis_size, split_axis, concat_axis, tiled } => {
            Collective::AllToAll { axes: axes.clone(), axis_size: *axis_size, split_axis: *concat_axis, concat_axis: *split_axis, tiled: *tiled }
        }
        Collective::Pmax { .. } | Collective::Pmin { .. } | Collective::AxisIndex { .. } => {
            return Err(Error::type_error(format!("Differentiation rule for '{}' not implemented", c.name())))
        }
    };
    crate::lax::parallel::coll(t, ct)
}

fn zeros_of(a: &ShapedArray) -> Result<Array> {
    super::ad::zeros(&a.strong())
}

fn mesh_axes(mesh: &Mesh) -> Vec<(String, usize)> {
    mesh.axis_names().iter().cloned().zip(mesh.axis_sizes().iter().copied()).collect()
}

/// Traces `body` on blocks of `avals` (mesh axes bound) and binds it as a `shard_map`
/// over `args` (its constants become leading replicated operands).
fn bind_body(
    p: &ShardMapParams,
    avals: &[ShapedArray],
    in_specs: Vec<PartitionSpec>,
    out_specs: Vec<PartitionSpec>,
    args: Vec<Array>,
    body: impl FnOnce(Vec<Array>) -> Result<Vec<Array>>,
) -> Result<Vec<Array>> {
    let traced = {
        let _env = crate::lax::parallel::bind_axes(&mesh_axes(&p.mesh));
        trace_to_jaxpr("shard_map", avals, body)?
    };
    let mut jaxpr = traced.jaxpr;
    let nconst = jaxpr.constvars.len();
    let mut invars = std::mem::take(&mut jaxpr.constvars);
    invars.append(&mut jaxpr.invars);
    jaxpr.invars = invars;
    let mut specs = vec![PartitionSpec::default(); nconst];
    specs.extend(in_specs);
    let params = ShardMapParams { jaxpr, mesh: p.mesh.clone(), in_specs: specs, out_specs, check_vma: false, name: p.name.clone() };
    let ops: Vec<Operand> = traced.consts.into_iter().chain(args).map(Operand::Array).collect();
    bind(Primitive::ShardMap(Box::new(params)), ops, Location::caller())
}

/// JVP of a `shard_map` equation: a `shard_map` of the body's JVP (tangents split and
/// assembled by the same specs as their values).
pub(crate) fn jvp(p: &ShardMapParams, ins: &[Array], ts: &[Option<Array>]) -> Result<(Vec<Array>, Vec<Option<Array>>)> {
    let n = ins.len();
    let block_in: Vec<ShapedArray> = p.jaxpr.invars.iter().map(|v| v.aval.clone()).collect();
    let mut avals = block_in.clone();
    avals.extend(block_in.iter().cloned());
    let mut args: Vec<Array> = ins.to_vec();
    for (t, x) in ts.iter().zip(ins) {
        args.push(match t {
            Some(t) => t.clone(),
            None => zeros_of(&x.aval())?,
        });
    }
    let mut in_specs = p.in_specs.clone();
    in_specs.extend(p.in_specs.iter().cloned());
    let mut out_specs = p.out_specs.clone();
    out_specs.extend(p.out_specs.iter().cloned());
    let body = p.jaxpr.clone();
    let outs = bind_body(p, &avals, in_specs, out_specs, args, move |tr| {
        let (xs, dxs) = tr.split_at(n);
        let dxs: Vec<Option<Array>> = dxs.iter().map(|t| Some(t.clone())).collect();
        let (outs, touts) = super::ad::jvp_jaxpr(&body, &[], xs, &dxs)?;
        let mut all = outs.clone();
        for (t, o) in touts.into_iter().zip(&outs) {
            all.push(match t {
                Some(t) => t,
                None => zeros_of(&o.aval())?,
            });
        }
        Ok(all)
    })?;
    let m = p.jaxpr.outvars.len();
    let (o, t) = outs.split_at(m);
    Ok((o.to_vec(), t.iter().map(|t| Some(t.clone())).collect()))
}

/// VJP of a `shard_map` equation: a `shard_map` of the body's VJP over (blocks, cotangent
/// blocks). A cotangent that varies over a mesh axis its input's in_spec omits (the input
/// was the same on every device but its uses differ) is summed over that axis, as JAX's
/// transpose of the implicit `pvary` does.
pub(crate) fn vjp(p: &ShardMapParams, ins: &[Array], cts: &[Option<Array>]) -> Result<Vec<Option<Array>>> {
    let n = ins.len();
    let block_in: Vec<ShapedArray> = p.jaxpr.invars.iter().map(|v| v.aval.clone()).collect();
    let block_out: Vec<ShapedArray> = p.jaxpr.outvars.iter().map(|a| a.aval().clone()).collect();
    let mut avals = block_in.clone();
    avals.extend(block_out.iter().cloned());
    let mut args: Vec<Array> = ins.to_vec();
    for (c, o) in cts.iter().zip(&p.jaxpr.outvars) {
        args.push(match c {
            Some(c) => c.clone(),
            None => zeros_of(&global_aval(&p.mesh, &p.out_specs[args.len() - n], o.aval()))?,
        });
    }
    let mut in_specs = p.in_specs.clone();
    in_specs.extend(p.out_specs.iter().cloned());
    let body = p.jaxpr.clone();
    let backward = |tr: Vec<Array>, sums: &[Vma]| -> Result<Vec<Array>> {
        let (xs, cs) = tr.split_at(n);
        let cs: Vec<Option<Array>> = cs.iter().map(|c| Some(c.clone())).collect();
        let (_, in_cts) = super::ad::vjp_jaxpr(&body, &[], xs, &cs)?;
        let mut out = Vec::with_capacity(n);
        for ((c, x), sum) in in_cts.into_iter().zip(xs).zip(sums) {
            let c = match c {
                Some(c) => c,
                None => zeros_of(&x.aval())?,
            };
            out.push(if *sum != 0 { crate::lax::psum(&c, crate::lax::parallel::AxisNames(mask_names(&p.mesh, *sum)))? } else { c });
        }
        Ok(out)
    };
    // Which input cotangents vary over axes their in_spec omits: trace once to find out.
    let probe = {
        let _env = crate::lax::parallel::bind_axes(&mesh_axes(&p.mesh));
        trace_to_jaxpr("shard_map", &avals, |tr| backward(tr, &vec![0; n]))?
    };
    let mut spec_in: Vec<Vma> = vec![0; probe.jaxpr.constvars.len()];
    spec_in.extend(in_specs.iter().map(|s| spec_mask(&p.mesh, s)));
    let mut probe_j = probe.jaxpr.clone();
    let mut iv = std::mem::take(&mut probe_j.constvars);
    iv.append(&mut probe_j.invars);
    probe_j.invars = iv;
    let varies = output_vma(&probe_j, &spec_in, &p.mesh);
    let sums: Vec<Vma> = varies.iter().zip(&p.in_specs).map(|(v, s)| v & !spec_mask(&p.mesh, s)).collect();
    let outs = bind_body(p, &avals, in_specs, p.in_specs.clone(), args, |tr| backward(tr, &sums))?;
    Ok(outs.into_iter().zip(ins).map(|(c, x)| if x.dtype().is_float() { Some(c) } else { None }).collect())
}

fn mask_names(mesh: &Mesh, m: Vma) -> Vec<String> {
    mesh.axis_names().iter().enumerate().filter(|(k, _)| m & (1 << k) != 0).map(|(_, n)| n.clone()).collect()
}
