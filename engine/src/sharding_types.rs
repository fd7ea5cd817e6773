//! Shardings and memory spaces in jaxpr types, as JAX prints them under explicit
//! sharding ("sharding in types"): a dim split over `Explicit` mesh axes prints
//! `f32[8@x]`, `f32[8@(x,y),4]`; a value in pinned host memory `f32<host>[8]` (JAX's
//! `MemorySpace.Host`; `unpinned_host` is `MemorySpace.Device` there, so it prints
//! plain). Dims over `Auto` axes print plain, as in JAX.
//!
//! Our avals (`ShapedArray`) stay shape, dtype and weak type: caches, transformations
//! and lowering never see these annotations. Instead a traced jaxpr of arguments that are
//! sharded on an explicit mesh or in pinned host memory keeps its arguments' types
//! (`ClosedJaxpr::in_types`, set by `Jitted::trace`/`make_jaxpr` and `%jaxpr`), and the
//! printer propagates them through every equation and sub-jaxpr (`var_types`) with the
//! sharding rules (`sharding_rules::eqn_rule`) and JAX's memory-space rule
//! (`memory_space_rule`). **A jaxpr without such arguments prints exactly as before.**
//!
//! The same memory-space rule gives a jitted call's result kinds (`out_spaces`): results
//! computed from pinned-host arguments are made in pinned host memory, as JAX 0.10.2 does
//! on CPU (`jit(f)(x_host)` gives `memory_kind=pinned_host` unless `out_shardings` says
//! otherwise), and mixing host and device operands is JAX's `ValueError`.

use crate::error::{Error, Result};
use crate::ir::{Atom, Jaxpr, Primitive, ShapedArray};
use crate::runtime::{DeviceArray, MemoryKind};
use crate::sharding::{AxisType, Mesh};
use crate::sharding_rules::{dims_of, Dims};
use std::collections::HashMap;
use std::sync::Arc;

/// The argument types of a traced call beyond shape and dtype: per invar, the dims it is
/// split as (on `mesh`) and whether it is in pinned host memory.
#[derive(Clone, Debug)]
pub struct InTypes {
    mesh: Option<Mesh>,
    dims: Vec<Dims>,
    host: Vec<bool>,
}

/// What a value's type carries beyond its aval.
#[derive(Clone, Debug, Default)]
struct Note {
    dims: Dims,
    host: bool,
}

impl Note {
    fn plain(aval: &ShapedArray) -> Note {
        Note { dims: vec![vec![]; aval.ndim()], host: false }
    }
}

/// Whether `mesh` has an `Explicit` axis (only those show in types).
fn has_explicit(mesh: &Mesh) -> bool {
    mesh.axis_types().iter().any(|t| *t == AxisType::Explicit)
}

/// The types of a call's arguments (`leaves`, `None` for a spec), when some argument is
/// sharded over an explicit mesh or in pinned host memory; `None` otherwise (the jaxpr
/// prints plain). Values sharded on another mesh than the first one count as unsharded.
pub(crate) fn in_types(jaxpr: &Jaxpr, leaves: &[Option<Arc<DeviceArray>>]) -> Option<Arc<InTypes>> {
    types_of(jaxpr, |i| leaves.get(i).and_then(|l| l.as_deref())).map(Arc::new)
}

/// [`in_types`] with argument i's value given by `leaf(i)` (`None`: a spec or a tracer).
fn types_of<'a>(jaxpr: &Jaxpr, leaf: impl Fn(usize) -> Option<&'a DeviceArray>) -> Option<InTypes> {
    let mesh = (0..jaxpr.invars.len())
        .filter_map(&leaf)
        .find_map(|d| d.sharded_info().map(|s| s.sharding.mesh.clone()))
        .filter(has_explicit);
    let host: Vec<bool> = (0..jaxpr.invars.len()).map(|i| leaf(i).is_some_and(|d| d.memory_kind == MemoryKind::PinnedHost)).collect();
    if mesh.is_none() && !host.iter().any(|h| *h) {
        return None;
    }
    let dims: Vec<Dims> = jaxpr
        .invars
        .iter()
        .enumerate()
        .map(|(i, v)| match (leaf(i).and_then(|d| d.sharded_info()), &mesh) {
            (Some(s), Some(m)) if &s.sharding.mesh == m => dims_of(&s.sharding.spec, v.aval.ndim()),
            _ => vec![vec![]; v.aval.ndim()],
        })
        .collect();
    Some(InTypes { mesh, dims, host })
}

/// A value's type beyond its aval: its sharding (on its mesh as is, axis types
/// unswitched) and whether it is in pinned host memory.
#[derive(Clone, Debug)]
pub(crate) struct ValueType {
    pub sharding: Option<crate::sharding::NamedSharding>,
    pub host: bool,
}

impl ValueType {
    /// A concrete array's type; `None` when plain (unsharded, device memory).
    pub(crate) fn of_device(d: &DeviceArray) -> Option<ValueType> {
        let t = ValueType { sharding: d.sharded_info().map(|s| s.sharding.clone()), host: d.memory_kind == MemoryKind::PinnedHost };
        (t.sharding.is_some() || t.host).then_some(t)
    }
}

/// The types of `flat`'s leaves (`None` for a plain value or a spec). A tracer's is
/// looked at only when some trace has typed arguments (each costs a propagation over its
/// trace so far; with only a mesh set, tracers are plain but for a `sharding_constraint`).
pub(crate) fn leaf_types(flat: &crate::trace::pytree::Flat) -> Vec<Option<ValueType>> {
    use crate::trace::pytree::ArgLeaf;
    let typed = crate::trace::has_typed_args();
    flat.leaves
        .iter()
        .map(|l| match l {
            ArgLeaf::Value(a) if typed || !a.is_tracer() => crate::sharding::value_type(a),
            _ => None,
        })
        .collect()
}

/// Gives the innermost trace (a function just started being traced on tracers for
/// `flat`'s leaves: a loop body, a branch, `grad`'s function) those leaves' types, when
/// one is typed, so that `typeof_` inside shows them.
pub(crate) fn type_innermost_args(types: Vec<Option<ValueType>>) {
    if types.iter().any(|t| t.is_some()) {
        if let Some(id) = crate::trace::innermost_trace_id() {
            crate::trace::set_arg_types(id, types);
        }
    }
}

/// The type of `jaxpr`'s one output (a trace's value so far, `trace::partial_jaxpr`) when
/// invar i has type `types[i]`: the mesh of the first sharded one (of any axis types; else
/// `fallback`, the mesh set by `set_mesh`, where a `sharding_constraint` may shard it), the
/// output's spec on it (propagated by the sharding rules; values on another mesh count as
/// unsharded) and whether it is in pinned host memory. `None` with no mesh and nothing in
/// pinned host memory. This is `typeof_` of a tracer inside `jit` (JAX keeps shardings in
/// avals; we derive them on demand).
pub(crate) fn traced_value_type(jaxpr: &Jaxpr, types: &[Option<ValueType>], fallback: Option<Mesh>) -> Option<(Option<Mesh>, crate::sharding::PartitionSpec, bool)> {
    let ty = |i: usize| types.get(i).and_then(|v| v.as_ref());
    let mesh = (0..jaxpr.invars.len()).filter_map(ty).find_map(|t| t.sharding.as_ref().map(|s| s.mesh.clone())).or(fallback);
    let host: Vec<bool> = (0..jaxpr.invars.len()).map(|i| ty(i).is_some_and(|t| t.host)).collect();
    if mesh.is_none() && !host.iter().any(|h| *h) {
        return None;
    }
    let ins: Vec<Note> = jaxpr
        .invars
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let dims = match (ty(i).and_then(|t| t.sharding.as_ref()), &mesh) {
                (Some(s), Some(m)) if &s.mesh == m => dims_of(&s.spec, v.aval.ndim()),
                _ => vec![vec![]; v.aval.ndim()],
            };
            Note { dims, host: host[i] }
        })
        .collect();
    let mut w = Walk { mesh: mesh.as_ref(), seen: HashMap::new(), strict: false, error: None };
    let out = w.jaxpr(jaxpr, &ins).pop()?;
    Some((mesh, crate::sharding_rules::spec_of(&out.dims), out.host))
}

/// JAX's default memory-space rule (`lax.utils._default_memory_space_rule`): the operands
/// of rank > 0 must all be in one space, which the results get; with none, device.
/// `types(i)` is operand i's type text for the error. Errors: JAX's `ValueError: memory_space
/// of all inputs passed to `add` must be the same. Got one operand with type: … and another
/// operand with type: …`.
fn memory_space_rule(name: &str, ins: &[(&ShapedArray, bool)], types: impl Fn(usize) -> String) -> Result<bool> {
    let mut prev: Option<(usize, bool)> = None;
    for (i, (a, host)) in ins.iter().enumerate() {
        if a.ndim() == 0 {
            continue;
        }
        if let Some((p, h)) = prev {
            if h != *host {
                return Err(Error::value_error(format!(
                    "memory_space of all inputs passed to `{name}` must be the same. Got one operand with type: {} and another operand with type: {}",
                    types(p),
                    types(i)
                )));
            }
        }
        prev = Some((i, *host));
    }
    Ok(prev.is_some_and(|(_, h)| h))
}

/// Walks a jaxpr tree propagating notes; records the non-plain ones by (jaxpr address, var id).
struct Walk<'m> {
    mesh: Option<&'m Mesh>,
    seen: HashMap<(usize, u32), Note>,
    /// Stop at the first memory-space error (`out_spaces`), else ignore it (printing).
    strict: bool,
    error: Option<Error>,
}

impl Walk<'_> {
    fn record(&mut self, j: &Jaxpr, id: u32, n: &Note) {
        if n.host || n.dims.iter().any(|d| !d.is_empty()) {
            self.seen.insert((j as *const Jaxpr as usize, id), n.clone());
        }
    }

    fn jaxpr(&mut self, j: &Jaxpr, ins: &[Note]) -> Vec<Note> {
        let mut env: HashMap<u32, Note> = HashMap::new();
        for (v, n) in j.invars.iter().zip(ins) {
            self.record(j, v.id, n);
            env.insert(v.id, n.clone());
        }
        for e in &j.eqns {
            let in_notes: Vec<Note> = e
                .inputs
                .iter()
                .map(|a| match a {
                    Atom::Var(v) => env.get(&v.id).cloned().unwrap_or_else(|| Note::plain(&v.aval)),
                    Atom::Lit(l) => Note::plain(&l.aval),
                })
                .collect();
            let outs = self.eqn(&e.primitive, &e.inputs, &in_notes, &e.outputs.iter().map(|v| v.aval.clone()).collect::<Vec<_>>());
            for (v, n) in e.outputs.iter().zip(outs) {
                self.record(j, v.id, &n);
                env.insert(v.id, n);
            }
        }
        j.outvars
            .iter()
            .map(|a| match a {
                Atom::Var(v) => env.get(&v.id).cloned().unwrap_or_else(|| Note::plain(&v.aval)),
                Atom::Lit(l) => Note::plain(&l.aval),
            })
            .collect()
    }

    /// The notes of one equation's results (recursing into its sub-jaxprs).
    fn eqn(&mut self, prim: &Primitive, inputs: &[Atom], ins: &[Note], out_avals: &[ShapedArray]) -> Vec<Note> {
        let plain = || out_avals.iter().map(Note::plain).collect::<Vec<Note>>();
        let sub = |w: &mut Self, j: &Jaxpr, ins: &[Note]| -> Option<Vec<Note>> {
            (j.invars.len() == ins.len()).then(|| w.jaxpr(j, ins))
        };
        let from_body = match prim {
            Primitive::Pjit { jaxpr, .. } => sub(self, &jaxpr.jaxpr, ins),
            Primitive::CustomJvpCall { call_jaxpr, .. } | Primitive::CustomVjpCall { call_jaxpr, .. } => sub(self, call_jaxpr, ins),
            Primitive::Checkpoint { jaxpr, .. } => sub(self, jaxpr, ins),
            Primitive::Cond { branches } => {
                let mut first = None;
                for b in branches {
                    let r = sub(self, b, ins.get(1..).unwrap_or(&[]));
                    first = first.or(r);
                }
                first
            }
            Primitive::While { cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts } => {
                let (cc, rest) = ins.split_at((*cond_nconsts).min(ins.len()));
                let (bc, carry) = rest.split_at((*body_nconsts).min(rest.len()));
                let body_in: Vec<Note> = bc.iter().chain(carry).cloned().collect();
                sub(self, body_jaxpr, &body_in);
                let cond_in: Vec<Note> = cc.iter().chain(carry).cloned().collect();
                sub(self, cond_jaxpr, &cond_in);
                Some(carry.to_vec())
            }
            Primitive::Scan { jaxpr, num_consts, num_carry, .. } => {
                let (nc, nk) = ((*num_consts).min(ins.len()), *num_carry);
                let body_in: Vec<Note> = ins
                    .iter()
                    .enumerate()
                    .map(|(i, n)| if i < nc + nk { n.clone() } else { Note { dims: n.dims.get(1..).unwrap_or(&[]).to_vec(), host: n.host } })
                    .collect();
                sub(self, jaxpr, &body_in).map(|outs| {
                    let carry = ins.iter().skip(nc).take(nk).cloned();
                    let ys = outs.into_iter().skip(nk).map(|n| Note { dims: std::iter::once(vec![]).chain(n.dims).collect(), host: n.host });
                    carry.chain(ys).collect()
                })
            }
            Primitive::ShardMap(sm) => Some(
                sm.out_specs
                    .iter()
                    .zip(out_avals)
                    .map(|(s, a)| Note { dims: if self.mesh.is_some_and(|m| sm.mesh.same_grid(m)) { dims_of(s, a.ndim()) } else { vec![vec![]; a.ndim()] }, host: false })
                    .collect(),
            ),
            Primitive::DebugCallback { .. } => return vec![],
            _ => None,
        };
        if let Some(outs) = from_body {
            if outs.len() == out_avals.len() {
                return outs;
            }
            return plain();
        }
        // Shardings: the propagation rules (errors there are the call's, not the printer's).
        let dims: Vec<Dims> = match self.mesh {
            Some(m) => {
                let avals: Vec<&ShapedArray> = inputs.iter().map(|a| a.aval()).collect();
                let in_dims: Vec<Dims> = ins.iter().map(|n| n.dims.clone()).collect();
                crate::sharding_rules::eqn_rule(prim, m, &avals, &in_dims, out_avals).unwrap_or_else(|_| plain().into_iter().map(|n| n.dims).collect())
            }
            None => plain().into_iter().map(|n| n.dims).collect(),
        };
        let host = match prim {
            Primitive::DevicePut { memory_kind } => *memory_kind == MemoryKind::PinnedHost,
            _ => {
                let pairs: Vec<(&ShapedArray, bool)> = inputs.iter().zip(ins).map(|(a, n)| (a.aval(), n.host)).collect();
                match memory_space_rule(prim.name(), &pairs, |i| long_text(inputs[i].aval(), &ins[i], self.mesh)) {
                    Ok(h) => h,
                    Err(e) => {
                        if self.strict && self.error.is_none() {
                            self.error = Some(e);
                        }
                        pairs.iter().any(|(_, h)| *h)
                    }
                }
            }
        };
        out_avals.iter().zip(dims).map(|(a, d)| Note { dims: if d.len() == a.ndim() { d } else { vec![vec![]; a.ndim()] }, host }).collect()
    }
}

/// The dims of one type, explicit axes only: `8@x`, `8@(x,y)`, `4`.
fn dims_text(aval: &ShapedArray, n: &Note, mesh: Option<&Mesh>) -> String {
    let explicit = |a: &String| mesh.is_some_and(|m| m.axis_names().iter().position(|x| x == a).is_some_and(|k| m.axis_types()[k] == AxisType::Explicit));
    let parts: Vec<String> = aval
        .shape
        .iter()
        .enumerate()
        .map(|(d, size)| {
            let axes: Vec<&String> = n.dims.get(d).map(|e| e.iter().filter(|a| explicit(a)).collect()).unwrap_or_default();
            match axes.len() {
                0 => size.to_string(),
                1 => format!("{size}@{}", axes[0]),
                _ => format!("{size}@({})", axes.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(",")),
            }
        })
        .collect();
    parts.join(",")
}

/// The jaxpr type text: `f32<host>[8@x]`.
fn short_text(aval: &ShapedArray, n: &Note, mesh: Option<&Mesh>) -> String {
    format!("{}{}[{}]", aval.dtype.short_name(), if n.host { "<host>" } else { "" }, dims_text(aval, n, mesh))
}

/// The `typeof` type text: `float32<host>[8@x]` (JAX's error messages use it).
fn long_text(aval: &ShapedArray, n: &Note, mesh: Option<&Mesh>) -> String {
    format!("{}{}{}[{}]", if aval.weak_type { "~" } else { "" }, aval.dtype.name(), if n.host { "<host>" } else { "" }, dims_text(aval, n, mesh))
}

/// The type text of every variable of `top` (and its sub-jaxprs) whose type carries a
/// sharding or memory space, by (address of its jaxpr, var id), for the printer.
pub(crate) fn var_types(top: &Jaxpr, t: &InTypes) -> HashMap<(usize, u32), String> {
    let mut w = Walk { mesh: t.mesh.as_ref(), seen: HashMap::new(), strict: false, error: None };
    let ins: Vec<Note> = t.dims.iter().zip(&t.host).map(|(d, h)| Note { dims: d.clone(), host: *h }).collect();
    w.jaxpr(top, &ins);
    let mut by_id: HashMap<(usize, u32), ShapedArray> = HashMap::new();
    collect_avals(top, &mut by_id);
    w.seen
        .into_iter()
        .filter_map(|(k, n)| by_id.get(&k).map(|a| (k, short_text(a, &n, t.mesh.as_ref()))))
        .collect()
}

fn collect_avals(j: &Jaxpr, out: &mut HashMap<(usize, u32), ShapedArray>) {
    let at = j as *const Jaxpr as usize;
    for v in j.constvars.iter().chain(&j.invars) {
        out.insert((at, v.id), v.aval.clone());
    }
    for e in &j.eqns {
        for v in &e.outputs {
            out.insert((at, v.id), v.aval.clone());
        }
        for s in e.primitive.sub_jaxprs() {
            collect_avals(s, out);
        }
    }
}

/// Which results of `jaxpr` are in pinned host memory when argument i is there iff
/// `host[i]` (JAX's memory-space rule through every equation; `device_put` to a kind sets
/// it). Errors: JAX's `ValueError` for an equation mixing host and device operands.
pub(crate) fn out_spaces(jaxpr: &Jaxpr, host: &[bool]) -> Result<Vec<bool>> {
    let mut w = Walk { mesh: None, seen: HashMap::new(), strict: true, error: None };
    let ins: Vec<Note> = jaxpr.invars.iter().enumerate().map(|(i, v)| Note { dims: vec![vec![]; v.aval.ndim()], host: host.get(i).copied().unwrap_or(false) }).collect();
    let outs = w.jaxpr(jaxpr, &ins);
    match w.error {
        Some(e) => Err(e),
        None => Ok(outs.into_iter().map(|n| n.host).collect()),
    }
}

/// The memory kinds of a jitted call's results: `declared` (the trace's `out_shardings` /
/// `device_put` kinds; empty: all device) where it names a host kind, else pinned host for
/// results the memory-space rule puts there (`out_spaces`), else device. Empty when all are
/// device. Errors: `out_spaces`'.
pub(crate) fn call_out_kinds(jaxpr: &Jaxpr, inputs: &[&DeviceArray], declared: &[MemoryKind]) -> Result<Vec<MemoryKind>> {
    if !inputs.iter().any(|d| d.memory_kind == MemoryKind::PinnedHost) {
        return Ok(declared.to_vec());
    }
    // The arguments' full types (explicit-mesh shardings too): a memory-space error shows
    // them as JAX's does (`float32<host>[8@x]`).
    let spaces = match types_of(jaxpr, |i| inputs.get(i).copied()) {
        Some(t) => {
            let mut w = Walk { mesh: t.mesh.as_ref(), seen: HashMap::new(), strict: true, error: None };
            let ins: Vec<Note> = t.dims.iter().zip(&t.host).map(|(d, h)| Note { dims: d.clone(), host: *h }).collect();
            let outs = w.jaxpr(jaxpr, &ins);
            if let Some(e) = w.error {
                return Err(e);
            }
            outs.into_iter().map(|n| n.host).collect()
        }
        None => vec![false; jaxpr.outvars.len()],
    };
    let kinds: Vec<MemoryKind> = spaces
        .iter()
        .enumerate()
        .map(|(i, h)| match declared.get(i) {
            Some(k) if k.is_host() => *k,
            _ if *h => MemoryKind::PinnedHost,
            _ => MemoryKind::Device,
        })
        .collect();
    Ok(if kinds.iter().any(|k| k.is_host()) { kinds } else { vec![] })
}

/// An eager op's results' memory kind on `inputs` (JAX's memory-space rule): pinned host
/// when its operands of rank > 0 are there, else `None` (device). Free unless some input
/// is in pinned host memory. Errors: JAX's `ValueError` for host and device operands mixed.
pub(crate) fn eager_out_kind(name: &str, inputs: &[Arc<DeviceArray>]) -> Result<Option<MemoryKind>> {
    if !inputs.iter().any(|d| d.memory_kind == MemoryKind::PinnedHost) {
        return Ok(None);
    }
    let pairs: Vec<(&ShapedArray, bool)> = inputs.iter().map(|d| (&d.aval, d.memory_kind == MemoryKind::PinnedHost)).collect();
    let host = memory_space_rule(name, &pairs, |i| crate::sharding::type_text(&inputs[i]))?;
    Ok(host.then_some(MemoryKind::PinnedHost))
}
