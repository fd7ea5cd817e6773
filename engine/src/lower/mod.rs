//! Lowering: a `ClosedJaxpr` becomes an MLIR module (text) in upstream dialects at tensor
//! level: `module @jit_<name> { func.func public @main(%arg0: tensor<..>, ..) -> (..) }`.
//!
//! Invariants kept here:
//! - The text uses only func, arith, math, tensor, linalg (plus `bufferization.to_buffer` and
//!   `memref.cast` for host callbacks); the memref calling convention belongs to `compile`.
//!   Exception: a jaxpr with `shard_map` lowers, for display only, to JAX's
//!   `sdy.manual_computation` regions and StableHLO collectives (`manual.rs`); such a
//!   module is never compiled.
//! - `@main`'s parameters are the large-constant parameters (`%constK`, one per entry of
//!   `LoweredModule::const_args`, in order) followed by the user's arguments (`%argI`, whose
//!   avals are `LoweredModule::in_avals`); its results are the jaxpr's outputs in order
//!   (`out_avals`).
//! - Constants of the jaxpr (and of nested `pjit` jaxprs) with at most `MAX_INLINE_CONST`
//!   elements are embedded as `arith.constant dense<..>`; larger ones become leading
//!   parameters, so module text stays small and cache keys stay cheap.
//! - Every value of size 0 is a `tensor.empty()`: no op ever iterates an empty dimension
//!   except reductions and contractions over one (which yield their init value).
//!
//! `pjit` equations are inlined; `debug_callback` becomes calls of the runtime symbols
//! `jaxrepl_callback_arg_<dtype>(i64 id, i64 index, memref<*xT>)` per operand followed by
//! `jaxrepl_callback_fire(i64 id, i64 nargs)` (see `compile::callbacks`).

pub(crate) mod approx;
mod array_ops;
mod bits;
mod control;
mod conv;
mod emit;
mod indexing;
pub(crate) mod manual;
mod precision;
mod recompute;
mod scalar;
mod shape_ops;
mod sort;
mod structured;
#[cfg(test)]
pub(crate) mod tests;

pub(crate) use emit::memref_of;
pub use structured::{REDUCE_SPLIT_MAX_OUT, REDUCE_SPLIT_MIN, REDUCE_SPLIT_PARTS};

use crate::error::Error;
use crate::ir::{Atom, ClosedJaxpr, DType, Eqn, Jaxpr, Literal, Primitive, ShapedArray, Var};
use crate::runtime::{Buffer, MemoryKind};
use emit::{dense_lit, scalar_lit, Emitter};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

/// Constants with at most this many elements are embedded in the module text.
pub const MAX_INLINE_CONST: usize = 64;

/// Options of `lower_jaxpr`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LowerOptions {
    /// One flag per user argument (or empty for none donated). A donated argument is
    /// marked `{tf.aliasing_output = j : i32}` with the first not yet aliased output `j`
    /// of the same shape and dtype, as JAX does. Execution does not reuse donated buffers yet.
    pub donated: Vec<bool>,
    /// Per user argument, its memory kind (empty: all `device`). Host kinds are marked
    /// `{mhlo.memory_kind = "pinned_host"}` on `@main`'s parameters, as JAX's lowering does.
    pub in_memory_kinds: Vec<MemoryKind>,
    /// Per result, its memory kind (empty: all `device`): host kinds are marked
    /// `{mhlo.memory_kind = "pinned_host"}` on `@main`'s results.
    pub out_memory_kinds: Vec<MemoryKind>,
}

/// A lowered module: MLIR text plus what the compiled entry expects.
#[derive(Clone, Debug)]
pub struct LoweredModule {
    /// The module text, `module @jit_<name> { func.func public @main(..) -> (..) {..} }`.
    pub text: String,
    /// Avals of the user's arguments, in order (what `Executable::execute` takes). The
    /// constant parameters that precede them in `@main` are described by `const_args`.
    pub in_avals: Vec<ShapedArray>,
    /// Avals of the results, in the jaxpr's order.
    pub out_avals: Vec<ShapedArray>,
    /// Large constants passed as `@main`'s leading parameters (`%const0`, ...), in order.
    pub const_args: Vec<Arc<Buffer>>,
    /// Memory kind of each user argument (empty: all `device`; `LowerOptions`).
    pub in_memory_kinds: Vec<MemoryKind>,
    /// Memory kind of each result (empty: all `device`; `LowerOptions`).
    pub out_memory_kinds: Vec<MemoryKind>,
}

/// ` {mhlo.memory_kind = "pinned_host"}` for a host kind, else nothing.
fn memory_kind_attr(kinds: &[MemoryKind], i: usize) -> Option<String> {
    kinds.get(i).filter(|k| k.is_host()).map(|k| format!("mhlo.memory_kind = \"{}\"", k.name()))
}

/// Lowers a closed jaxpr to MLIR text. `name` names the module `@jit_<name>` (characters
/// outside `[A-Za-z0-9_$.]` become `_`).
///
/// Errors (`ErrorKind::Compile`): a primitive applied to a dtype it is not defined for, a
/// malformed jaxpr (unbound variable, wrong arity, operand shapes that disagree), a constant
/// buffer whose aval differs from its constvar's. `ErrorKind::Value`: `opts.donated` has the
/// wrong length.
pub fn lower_jaxpr(jaxpr: &ClosedJaxpr, name: &str, opts: &LowerOptions) -> Result<LoweredModule, Error> {
    let j = &jaxpr.jaxpr;
    if !opts.donated.is_empty() && opts.donated.len() != j.invars.len() {
        return Err(Error::value_error(format!(
            "donated has {} flags for {} arguments",
            opts.donated.len(),
            j.invars.len()
        )));
    }
    let mut l = Lowerer {
        e: Emitter::new(2),
        const_params: vec![],
        decls: BTreeSet::new(),
        lits: HashMap::new(),
        scope_prefix: format!("jit({name})"),
        manual: vec![],
        meshes: vec![],
        next_arg: j.invars.len(),
        channels: 0,
        dot_updates: HashMap::new(),
    };
    let args: Vec<Val> = j.invars.iter().enumerate().map(|(i, v)| Val::T(format!("%arg{i}"), v.aval.clone())).collect();
    let outs = l.body(j, &jaxpr.consts, args)?;
    let rets: Vec<(String, String)> = outs.iter().map(|v| (l.tensor(v), v.aval().mlir_tensor())).collect();

    let in_avals = j.in_avals();
    let out_avals: Vec<ShapedArray> = outs.iter().map(|v| v.aval().clone()).collect();
    let mut aliased = vec![false; out_avals.len()];
    let mut params: Vec<String> =
        l.const_params.iter().map(|(n, b)| format!("{n}: {}", b.aval().mlir_tensor())).collect();
    for (i, a) in in_avals.iter().enumerate() {
        let mut p = format!("%arg{i}: {}", a.mlir_tensor());
        let mut attrs: Vec<String> = vec![];
        if opts.donated.get(i) == Some(&true) {
            let hit = out_avals.iter().enumerate().find(|(k, o)| {
                !aliased[*k] && o.shape == a.shape && o.dtype == a.dtype
            });
            if let Some((k, _)) = hit {
                aliased[k] = true;
                attrs.push(format!("tf.aliasing_output = {k} : i32"));
            }
        }
        // (`tf.aliasing_output` first: `compile::parse_aliases` reads it at that place.)
        attrs.extend(memory_kind_attr(&opts.in_memory_kinds, i));
        if !attrs.is_empty() {
            p.push_str(&format!(" {{{}}}", attrs.join(", ")));
        }
        params.push(p);
    }
    // JAX's module name of a lambda is `jit__lambda`.
    let sym: String = if name == crate::transform::jit::LAMBDA {
        "_lambda".to_string()
    } else {
        name.chars().map(|c| if c.is_ascii_alphanumeric() || "_$.".contains(c) { c } else { '_' }).collect()
    };
    let mut text = format!("module @jit_{sym} {{\n");
    // Meshes first, in order of first use (as JAX's modules declare them).
    for (k, m) in l.meshes.iter().enumerate() {
        text.push_str(&format!("  {}\n", manual::sdy_mesh(&manual::mesh_symbol(k), m)));
    }
    for d in &l.decls {
        text.push_str(&format!("  {d}\n"));
    }
    let tys: Vec<&str> = rets.iter().map(|(_, t)| t.as_str()).collect();
    let results: Vec<String> = tys
        .iter()
        .enumerate()
        .map(|(i, t)| match memory_kind_attr(&opts.out_memory_kinds, i) {
            Some(a) => format!("{t} {{{a}}}"),
            None => t.to_string(),
        })
        .collect();
    text.push_str(&format!("  func.func public @main({}) -> ({}) {{\n", params.join(", "), results.join(", ")));
    text.push_str(&l.e.text);
    if rets.is_empty() {
        text.push_str("    return\n");
    } else {
        let names: Vec<&str> = rets.iter().map(|(n, _)| n.as_str()).collect();
        text.push_str(&format!("    return {} : {}\n", names.join(", "), tys.join(", ")));
    }
    text.push_str("  }\n}\n");
    Ok(LoweredModule {
        text,
        in_avals,
        out_avals,
        const_args: l.const_params.into_iter().map(|(_, b)| b).collect(),
        in_memory_kinds: opts.in_memory_kinds.clone(),
        out_memory_kinds: opts.out_memory_kinds.clone(),
    })
}

/// A lowered value: a tensor SSA value, or a scalar SSA value (a literal's
/// `arith.constant`) standing for a 0-d array, usable directly inside linalg bodies.
#[derive(Clone, Debug)]
pub(crate) enum Val {
    T(String, ShapedArray),
    S(String, ShapedArray),
}

impl Val {
    pub fn aval(&self) -> &ShapedArray {
        match self {
            Val::T(_, a) | Val::S(_, a) => a,
        }
    }
}

pub(crate) struct Lowerer {
    pub e: Emitter,
    /// Large constants that became parameters: (`%constK`, buffer).
    pub const_params: Vec<(String, Arc<Buffer>)>,
    /// Module-level declarations (runtime callback symbols).
    pub decls: BTreeSet<String>,
    /// Scalar literal constants already emitted: (spelling, dtype) -> SSA name.
    lits: HashMap<(String, DType), String>,
    /// `jit(<name>)`: the first component of every op location (JAX's name stack root).
    scope_prefix: String,
    /// The meshes of the `shard_map` bodies being lowered (innermost last; `manual.rs`).
    manual: Vec<crate::sharding::Mesh>,
    /// The distinct meshes of the module's `shard_map`s, in order of first use: mesh k is
    /// declared as `sdy.mesh @mesh` (k = 0), `@mesh_0`, `@mesh_1`, … (`manual.rs`).
    meshes: Vec<crate::sharding::Mesh>,
    /// The next block-argument number (`%argN`) for regions (`manual.rs`).
    next_arg: usize,
    /// Collective channel handles handed out (`manual.rs`).
    channels: usize,
    /// The body being lowered: `w ± c·dot(a, b)` updates computed by one GEMM call, by
    /// the update's output variable id ([`dot_updates`]).
    dot_updates: HashMap<u32, DotUpdate>,
}

/// `init ± scale·dot_general(..)` lowered as one call of the GEMM runtime that accumulates
/// into a copy of `init` (`jaxrepl_gemm_acc_*`, see [`Lowerer::dot_gemm`]).
#[derive(Clone, Debug)]
pub(crate) struct DotUpdate {
    /// The `dot_general` equation (its result is read only by this update).
    dot: Eqn,
    /// The value updated (`w`): the result's shape and dtype, or its trailing (rhs free)
    /// dims only, a row repeated over the others (a bias).
    init: Atom,
    /// The 0-d factor of the product (`c`), or none for `w ± dot`.
    scale: Option<Atom>,
    /// `w - …` (true) or `w + …`.
    negate: bool,
}

/// The initial value of an update of `out` (the result of `dot`): `init` itself, or, when
/// `init` is a single-use `broadcast_in_dim` of a value shaped like the dot's trailing
/// rhs-free dims (a bias `h @ w + b`), that value and the broadcast's equation index.
/// `None`: `init` is some other broadcast (materialising it would cost what the fusion
/// saves).
fn update_init(eqns: &[Eqn], dot: &Eqn, init: &Atom, out: &ShapedArray, single: &dyn Fn(&Atom) -> Option<usize>) -> Option<(Atom, Option<usize>)> {
    let Some(b) = single(init) else { return Some((init.clone(), None)) };
    let Primitive::BroadcastInDim { broadcast_dimensions, .. } = &eqns[b].primitive else { return Some((init.clone(), None)) };
    let [Atom::Var(s)] = eqns[b].inputs.as_slice() else { return None };
    let Primitive::DotGeneral { rhs_contracting, rhs_batch, .. } = &dot.primitive else { return None };
    let rnd = match dot.inputs.get(1) {
        Some(Atom::Var(r)) => r.aval.ndim(),
        _ => return None,
    };
    let nr = rnd.checked_sub(rhs_contracting.len() + rhs_batch.len())?;
    let nd = out.ndim();
    let tail = nd.checked_sub(nr)?;
    let rows = nr >= 1
        && s.aval.dtype == out.dtype
        && s.aval.shape == out.shape[tail..]
        && broadcast_dimensions.iter().copied().eq(tail..nd);
    rows.then(|| (Atom::Var(s.clone()), Some(b)))
}

/// The updates `w - c·d`, `w + c·d`, `c·d + w`, `w - d`, `w + d` (also with `d·c`, and `c`
/// a 0-d literal or variable, possibly broadcast by a `broadcast_in_dim`; `w` possibly a
/// broadcast row, a bias: [`update_init`]) of `eqns` whose
/// `d` is a `dot_general` through the GEMM runtime ([`structured::gemm_eligible`]) read
/// only by that update, as is the product `c·d`: the SGD step `w - lr·grad` after AD's
/// weight-gradient product, or a residual `x + h @ w`. The GEMM crate computes
/// `dst = α·dst + β·a·b`, so the update costs no pass of its own over memory: the runtime
/// copies `w` into the result panel by panel and accumulates the product into it. Returns
/// the updates by output variable id and the equations they absorb (the dots, products
/// and broadcasts; the update itself is lowered in the place of its equation). Equations
/// in `dead` are ignored.
fn dot_updates(eqns: &[Eqn], outvars: &[Atom], dead: &HashSet<usize>) -> (HashMap<u32, DotUpdate>, HashSet<usize>) {
    let mut updates = HashMap::new();
    let mut absorbed = HashSet::new();
    let mut uses: HashMap<u32, usize> = HashMap::new();
    let live = eqns.iter().enumerate().filter(|(i, _)| !dead.contains(i)).map(|(_, e)| e);
    for a in live.clone().flat_map(|e| e.inputs.iter()).chain(outvars.iter()) {
        if let Atom::Var(v) = a {
            *uses.entry(v.id).or_default() += 1;
        }
    }
    let mut producer: HashMap<u32, usize> = HashMap::new();
    for (i, e) in eqns.iter().enumerate() {
        if !dead.contains(&i) {
            for o in &e.outputs {
                producer.insert(o.id, i);
            }
        }
    }
    // The single-use equation producing `a`, if any.
    let single = |a: &Atom| -> Option<usize> {
        match a {
            Atom::Var(v) if uses.get(&v.id) == Some(&1) => producer.get(&v.id).copied(),
            _ => None,
        }
    };
    let is_scalar = |a: &Atom| match a {
        Atom::Var(v) => v.aval.ndim() == 0 && v.aval.dtype.is_float(),
        Atom::Lit(l) => l.aval.ndim() == 0 && l.aval.dtype.is_float(),
    };
    // A GEMM `dot_general` equation producing `a` (read once), with the update's aval.
    let gemm_dot = |a: &Atom, out: &ShapedArray| -> Option<usize> {
        let i = single(a)?;
        let e = &eqns[i];
        let Primitive::DotGeneral { lhs_contracting, precision, .. } = &e.primitive else { return None };
        let plain = matches!(precision.or_else(crate::lax::precision::default_matmul_precision), None | Some(crate::ir::DotPrecision::Levels(..)));
        let (Some(Atom::Var(l)), Some(Atom::Var(r)), [o]) = (e.inputs.first(), e.inputs.get(1), e.outputs.as_slice()) else { return None };
        let ok = plain
            && matches!(out.dtype, DType::F32 | DType::F64)
            && e.inputs.len() == 2
            && o.aval.shape == out.shape
            && o.aval.dtype == out.dtype
            && structured::gemm_eligible(&l.aval, &r.aval, &o.aval, lhs_contracting);
        ok.then_some(i)
    };
    for (i, e) in eqns.iter().enumerate() {
        if dead.contains(&i) {
            continue;
        }
        let negate = match e.primitive {
            Primitive::Sub => true,
            Primitive::Add => false,
            _ => continue,
        };
        let ([x, y], [o]) = (e.inputs.as_slice(), e.outputs.as_slice()) else { continue };
        let orders: &[(&Atom, &Atom)] = if negate { &[(x, y)] } else { &[(x, y), (y, x)] };
        for &(init, t) in orders {
            let init_ok = matches!(init, Atom::Var(v) if v.aval.shape == o.aval.shape && v.aval.dtype == o.aval.dtype);
            if !init_ok {
                continue;
            }
            // `t` is the dot itself, or `c·d` / `d·c`.
            if let Some(d) = gemm_dot(t, &o.aval) {
                let Some((init, bcast)) = update_init(eqns, &eqns[d], init, &o.aval, &single) else { continue };
                absorbed.extend([d].into_iter().chain(bcast));
                updates.insert(o.id, DotUpdate { dot: eqns[d].clone(), init, scale: None, negate });
                break;
            }
            let Some(m) = single(t) else { continue };
            let me = &eqns[m];
            let (Primitive::Mul, [p, q]) = (&me.primitive, me.inputs.as_slice()) else { continue };
            let mut found = None;
            for (dv, cv) in [(p, q), (q, p)] {
                let Some(d) = gemm_dot(dv, &o.aval) else { continue };
                if is_scalar(cv) {
                    found = Some((d, cv.clone(), None));
                    break;
                }
                // A 0-d value broadcast to the product's shape.
                if let Some(b) = single(cv) {
                    if let (Primitive::BroadcastInDim { .. }, [s]) = (&eqns[b].primitive, eqns[b].inputs.as_slice()) {
                        if is_scalar(s) {
                            found = Some((d, s.clone(), Some(b)));
                            break;
                        }
                    }
                }
            }
            if let Some((d, c, b)) = found {
                let Some((init, bcast)) = update_init(eqns, &eqns[d], init, &o.aval, &single) else { continue };
                absorbed.extend([d, m].into_iter().chain(b).chain(bcast));
                updates.insert(o.id, DotUpdate { dot: eqns[d].clone(), init, scale: Some(c), negate });
                break;
            }
        }
    }
    (updates, absorbed)
}


/// The equations of `j` with every `transpose` that only swaps the two free-dim groups of
/// a `dot_general` result used nowhere else folded into that `dot_general` (operands and
/// dimension numbers swapped, so it produces the transposed layout directly); `None` when
/// there is nothing to fold. This is the shape reverse-mode AD gives the rhs cotangent of
/// `x @ w` (`transpose(dot_general(ct, x, ((0,), (0,))), (1, 0))`, as in JAX), which
/// otherwise costs a materialised transpose of the weight gradient.
fn fold_dot_transposes(j: &Jaxpr) -> Option<Vec<Eqn>> {
    let mut uses: HashMap<u32, usize> = HashMap::new();
    let atoms = j.eqns.iter().flat_map(|e| e.inputs.iter()).chain(j.outvars.iter());
    for a in atoms {
        if let Atom::Var(v) = a {
            *uses.entry(v.id).or_default() += 1;
        }
    }
    // Producer eqn index of each single-use dot_general result.
    let mut dots: HashMap<u32, usize> = HashMap::new();
    // (dot index, transpose index) pairs to fold.
    let mut folds: Vec<(usize, usize)> = vec![];
    for (i, e) in j.eqns.iter().enumerate() {
        match (&e.primitive, e.outputs.as_slice(), e.inputs.as_slice()) {
            (Primitive::DotGeneral { .. }, [o], [_, _]) if uses.get(&o.id) == Some(&1) => {
                dots.insert(o.id, i);
            }
            (Primitive::Transpose { permutation }, [_], [Atom::Var(v)]) => {
                if let Some(&d) = dots.get(&v.id) {
                    if swaps_free_groups(&j.eqns[d], permutation) {
                        folds.push((d, i));
                    }
                }
            }
            _ => {}
        }
    }
    if folds.is_empty() {
        return None;
    }
    let mut eqns = j.eqns.clone();
    let mut drop = vec![false; eqns.len()];
    for (d, t) in folds {
        let dot = &j.eqns[d];
        if let Primitive::DotGeneral { lhs_contracting, rhs_contracting, lhs_batch, rhs_batch, precision, preferred_element_type, .. } = &dot.primitive {
            eqns[d] = Eqn {
                primitive: Primitive::DotGeneral {
                    lhs_contracting: rhs_contracting.clone(),
                    rhs_contracting: lhs_contracting.clone(),
                    lhs_batch: rhs_batch.clone(),
                    rhs_batch: lhs_batch.clone(),
                    // The operands swap, so do per-operand levels.
                    precision: precision.map(|p| match p {
                        crate::ir::DotPrecision::Levels(a, b) => crate::ir::DotPrecision::Levels(b, a),
                        other => other,
                    }),
                    preferred_element_type: *preferred_element_type,
                    // Lowering computes the global value: shardings play no part here.
                    out_sharding: None,
                },
                inputs: vec![dot.inputs[1].clone(), dot.inputs[0].clone()],
                outputs: j.eqns[t].outputs.clone(),
                source: dot.source.clone(),
                name_stack: dot.name_stack.clone(),
                metadata: dot.metadata.clone(),
            };
            drop[t] = true;
        }
    }
    Some(eqns.into_iter().zip(drop).filter(|(_, d)| !d).map(|(e, _)| e).collect())
}

/// Whether `perm` maps the `[batch, lhs free, rhs free]` result of the `dot_general` `dot`
/// to `[batch, rhs free, lhs free]` (with at least one free dim on each side moved).
fn swaps_free_groups(dot: &Eqn, perm: &[usize]) -> bool {
    let Primitive::DotGeneral { lhs_contracting, rhs_contracting, lhs_batch, .. } = &dot.primitive else {
        return false;
    };
    let ndim = |a: &Atom| match a {
        Atom::Var(v) => v.aval.ndim(),
        Atom::Lit(l) => l.aval.ndim(),
    };
    let nb = lhs_batch.len();
    // A malformed dot (more named dims than it has) folds nothing; `dot` reports it.
    let (Some(nl), Some(nr)) = (
        ndim(&dot.inputs[0]).checked_sub(nb + lhs_contracting.len()),
        ndim(&dot.inputs[1]).checked_sub(nb + rhs_contracting.len()),
    ) else {
        return false;
    };
    if nl == 0 || nr == 0 || perm.len() != nb + nl + nr {
        return false;
    }
    let want: Vec<usize> = (0..nb).chain(nb + nl..nb + nl + nr).chain(nb..nb + nl).collect();
    perm == want.as_slice()
}

/// Indices of the equations of `eqns` none of whose results is read by a later live
/// equation or by `outvars`: dead code, which lowering skips (JAX's `dce_jaxpr`). Equations
/// with effects (`Primitive::has_effects`: debug/io callbacks, bodies containing them) and
/// the multi-device primitives (collectives, `shard_map`, sharding constraints,
/// `device_put`), which other devices or the partitioner rely on, are always kept.
pub(crate) fn dead_equations(eqns: &[Eqn], outvars: &[Atom]) -> HashSet<usize> {
    let mut dead = HashSet::new();
    let mut live: HashSet<u32> = outvars.iter().filter_map(|a| if let Atom::Var(v) = a { Some(v.id) } else { None }).collect();
    for (i, e) in eqns.iter().enumerate().rev() {
        let kept = e.primitive.has_effects()
            || matches!(
                e.primitive,
                Primitive::Collective(_) | Primitive::ShardMap(_) | Primitive::ShardingConstraint { .. } | Primitive::DevicePut { .. }
            );
        if !kept && !e.outputs.iter().any(|o| live.contains(&o.id)) {
            dead.insert(i);
            continue;
        }
        for a in &e.inputs {
            if let Atom::Var(v) = a {
                live.insert(v.id);
            }
        }
    }
    dead
}

fn malformed(msg: String) -> Error {
    Error::compile(format!("lowering: malformed jaxpr: {msg}"))
}

impl Lowerer {
    /// Lowers the equations of `j` with its constvars bound to `consts` and its invars to
    /// `args`; returns the values of its outvars.
    fn body(&mut self, j: &Jaxpr, consts: &[Arc<Buffer>], args: Vec<Val>) -> Result<Vec<Val>, Error> {
        if consts.len() != j.constvars.len() || args.len() != j.invars.len() {
            return Err(malformed(format!(
                "{} consts and {} args for {} constvars and {} invars",
                consts.len(),
                args.len(),
                j.constvars.len(),
                j.invars.len()
            )));
        }
        let mut env: HashMap<u32, Val> = HashMap::new();
        for (v, b) in j.constvars.iter().zip(consts) {
            let c = self.constant(v, b)?;
            env.insert(v.id, c);
        }
        for (v, a) in j.invars.iter().zip(args) {
            env.insert(v.id, a);
        }
        let folded = fold_dot_transposes(j);
        let eqns = folded.as_deref().unwrap_or(&j.eqns);
        // Fresh ids for the clones: the folded dots reuse the jaxpr's ids.
        let next_id = crate::lax::control::max_id(j) + 1;
        let recomputed = recompute::recompute_producers(eqns, &j.outvars, next_id);
        let eqns = recomputed.as_deref().unwrap_or(eqns);
        // Equations whose results are unused are dead code (JAX's DCE): not lowered. MLIR
        // removes dead tensor ops itself, but not the calls of the GEMM runtime or a
        // `pure_callback` (AD's cotangent of a closed-over input is such a product).
        let dead = dead_equations(eqns, &j.outvars);
        let (updates, absorbed) = dot_updates(eqns, &j.outvars, &dead);
        let outer = std::mem::replace(&mut self.dot_updates, updates);
        let mut lower = || -> Result<(), Error> {
            for (i, eq) in eqns.iter().enumerate() {
                if dead.contains(&i) || absorbed.contains(&i) {
                    continue;
                }
                self.eqn(eq, &mut env).map_err(|e| e.at(eq.source.clone()))?;
            }
            Ok(())
        };
        let r = lower();
        self.dot_updates = outer;
        r?;
        j.outvars.iter().map(|a| self.atom(a, &env)).collect()
    }

    fn atom(&mut self, a: &Atom, env: &HashMap<u32, Val>) -> Result<Val, Error> {
        match a {
            Atom::Var(v) => env.get(&v.id).cloned().ok_or_else(|| malformed(format!("variable {} is unbound", v.id))),
            Atom::Lit(l) => Ok(self.lit(l)),
        }
    }

    /// A literal as a (shared) scalar constant.
    fn lit(&mut self, l: &Literal) -> Val {
        let d = l.aval.dtype;
        let spelling = scalar_lit(l.value, d);
        let key = (spelling.clone(), d);
        let name = match self.lits.get(&key) {
            Some(n) => n.clone(),
            None => {
                let n = self.e.scalar_const(&spelling, d);
                self.lits.insert(key, n.clone());
                n
            }
        };
        if l.aval.ndim() == 0 {
            Val::S(name, l.aval.strong())
        } else {
            let t = self.splat(&name, &l.aval);
            Val::T(t, l.aval.strong())
        }
    }

    /// A constvar's value: embedded when small, a leading `%constK` parameter otherwise.
    fn constant(&mut self, v: &Var, b: &Arc<Buffer>) -> Result<Val, Error> {
        if b.shape() != v.aval.shape.as_slice() || b.dtype() != v.aval.dtype {
            return Err(malformed(format!("constant {} is {} but its buffer is {}", v.id, v.aval.short(), b.aval().short())));
        }
        let a = v.aval.strong();
        if a.size() == 0 {
            return Ok(Val::T(self.empty(&a), a));
        }
        if a.size() <= MAX_INLINE_CONST {
            let lit = dense_lit(b.bytes(), &a.shape, a.dtype);
            let n = self.e.op(&format!("arith.constant {lit} : {}", a.mlir_tensor()));
            return Ok(Val::T(n, a));
        }
        if let Some((n, _)) = self.const_params.iter().find(|(_, p)| Arc::ptr_eq(p, b)) {
            return Ok(Val::T(n.clone(), a)); // the same buffer (a pjit inlined twice): one parameter
        }
        let name = format!("%const{}", self.const_params.len());
        self.const_params.push((name.clone(), b.clone()));
        Ok(Val::T(name, a))
    }

    fn eqn(&mut self, eq: &Eqn, env: &mut HashMap<u32, Val>) -> Result<(), Error> {
        let update = match eq.outputs.as_slice() {
            [o] => self.dot_updates.remove(&o.id),
            _ => None,
        };
        // The update's own inputs include the absorbed product, which has no value.
        let ins: Vec<Val> = match &update {
            Some(_) => vec![],
            None => eq.inputs.iter().map(|a| self.atom(a, env)).collect::<Result<_, _>>()?,
        };
        // `jax.named_scope`: this equation's ops are located at `jit(f)/scope/prim` (equations
        // without a scope inside a scoped call keep the caller's location). Op metadata
        // (`set_xla_metadata`) is the metadata of a fused location around that name
        // (`jit(f)/prim` without a scope).
        let outer_loc = self.e.loc.clone();
        let name = match &eq.name_stack {
            Some(s) => Some(format!("{}/{s}/{}", self.scope_prefix, eq.primitive.name())),
            None if eq.metadata.is_some() => Some(format!("{}/{}", self.scope_prefix, eq.primitive.name())),
            None => None,
        };
        if let Some(n) = name {
            let quoted = crate::interactive::json_string(&n);
            self.e.loc = Some(match &eq.metadata {
                Some(m) => format!("fused<{m}>[{quoted}]"),
                None => quoted,
            });
        }
        let outs = match &eq.primitive {
            _ if update.is_some() => vec![self.dot_update(update.as_ref().expect("update"), &eq.outputs[0].aval.strong(), env)?],
            Primitive::DebugCallback { callback, .. } => {
                self.callback(*callback, &ins)?;
                vec![]
            }
            Primitive::PureCallback { callback, result_avals, .. } | Primitive::IoCallback { callback, result_avals, .. } => {
                self.host_callback(*callback, &ins, result_avals)?
            }
            Primitive::Pjit { jaxpr, .. } => self.body(&jaxpr.jaxpr, &jaxpr.consts, ins)?,
            // Display only (`manual.rs`): the module is never compiled.
            Primitive::ShardMap(sm) => self.manual_computation(sm, &ins, &eq.outputs)?,
            // A type change only (`pcast(.., to='varying')`): the value as it is.
            Primitive::Collective(crate::ir::Collective::Pvary { .. }) => ins.clone(),
            Primitive::Collective(c) => self.collective(c, &ins, &eq.outputs)?,
            // Identity at run time; it only matters to differentiation.
            Primitive::StopGradient => ins.clone(),
            // Identity on one device; the partitioner lays the value out (`partition.rs`).
            Primitive::ShardingConstraint { .. } => ins.clone(),
            // Identity: on CPU every memory kind is the same RAM; the kind is the result's
            // (`mhlo.memory_kind` on `@main`'s results, `LowerOptions::out_memory_kinds`).
            Primitive::DevicePut { .. } => ins.clone(),
            p if p.call_body().is_some() => self.body(p.call_body().expect("call body"), &[], ins)?,
            p @ (Primitive::Cond { .. } | Primitive::While { .. } | Primitive::Scan { .. }) => {
                self.control(p, &ins, &eq.outputs)?
            }
            p if p.is_multi_output_array_op() => self.array_op_multi(p, &ins, &eq.outputs)?,
            p => {
                let out = match eq.outputs.as_slice() {
                    [o] => o.aval.strong(),
                    _ => return Err(malformed(format!("`{}` needs one output, has {}", p.name(), eq.outputs.len()))),
                };
                let v = if out.size() == 0 { Val::T(self.empty(&out), out) } else { self.prim(p, &ins, &out)? };
                vec![v]
            }
        };
        if outs.len() != eq.outputs.len() {
            return Err(malformed(format!("`{}` gave {} values for {} outputs", eq.primitive.name(), outs.len(), eq.outputs.len())));
        }
        for (v, val) in eq.outputs.iter().zip(outs) {
            if val.aval().shape != v.aval.shape || val.aval().dtype != v.aval.dtype {
                return Err(malformed(format!(
                    "`{}` output is {} but the jaxpr says {}",
                    eq.primitive.name(),
                    val.aval().short(),
                    v.aval.short()
                )));
            }
            env.insert(v.id, val);
        }
        self.e.loc = outer_loc;
        Ok(())
    }

    /// One single-output primitive with a non-empty result `out`.
    fn prim(&mut self, p: &Primitive, ins: &[Val], out: &ShapedArray) -> Result<Val, Error> {
        use Primitive::*;
        let arity = |n: usize| -> Result<(), Error> {
            if ins.len() == n { Ok(()) } else { Err(malformed(format!("`{}` takes {n} operands, got {}", p.name(), ins.len()))) }
        };
        match p {
            p if p.is_unary_elementwise() => {
                arity(1)?;
                let d = ins[0].aval().dtype;
                self.ew(out, ins, &mut |e, a| scalar::unary(e, p, &a[0], d))
            }
            p if p.is_binary_elementwise() => {
                arity(2)?;
                let d = ins[0].aval().dtype;
                if ins[1].aval().dtype != d {
                    return Err(malformed(format!("`{}` on {} and {}", p.name(), d.name(), ins[1].aval().dtype.name())));
                }
                self.ew(out, ins, &mut |e, a| scalar::binary(e, p, &a[0], &a[1], d))
            }
            SelectN => {
                if ins.len() < 2 {
                    return Err(malformed("`select_n` needs a selector and at least one case".into()));
                }
                let wd = ins[0].aval().dtype;
                let d = out.dtype;
                self.ew(out, ins, &mut |e, a| Ok(scalar::select_n(e, &a[0], wd, &a[1..], d)))
            }
            BitcastConvertType { new_dtype } => {
                arity(1)?;
                let (from, to) = (ins[0].aval().dtype, *new_dtype);
                self.ew(out, ins, &mut |e, a| Ok(bits::bitcast(e, &a[0], from, to)))
            }
            ConvertElementType { new_dtype, .. } => {
                arity(1)?;
                let (from, to) = (ins[0].aval().dtype, *new_dtype);
                self.ew(out, ins, &mut |e, a| Ok(scalar::convert(e, &a[0], from, to)))
            }
            BroadcastInDim { broadcast_dimensions, .. } => {
                arity(1)?;
                self.broadcast(&ins[0], out, broadcast_dimensions)
            }
            Reshape { .. } => {
                arity(1)?;
                self.reshape(&ins[0], out)
            }
            Transpose { permutation } => {
                arity(1)?;
                self.transpose(&ins[0], out, permutation)
            }
            Iota { dimension, .. } => {
                arity(0)?;
                self.iota(out, *dimension)
            }
            ReduceSum { axes } | ReduceMax { axes } | ReduceMin { axes } => {
                arity(1)?;
                self.reduce(p, &ins[0], out, axes)
            }
            DotGeneral { lhs_contracting, rhs_contracting, lhs_batch, rhs_batch, precision, .. } => {
                arity(2)?;
                self.dot_precision(&ins[0], &ins[1], out, [lhs_contracting, rhs_contracting, lhs_batch, rhs_batch], *precision)
            }
            _ => self.array_op(p, ins, out),
        }
    }

    /// The tensor SSA name of a value (a scalar becomes `tensor.from_elements`).
    pub(crate) fn tensor(&mut self, v: &Val) -> String {
        match v {
            Val::T(n, _) => n.clone(),
            // A fill of an empty tensor (not `tensor.from_elements`) so that bufferization
            // can write it straight into a destination (a returned result: the output
            // buffer, no temporary allocation).
            Val::S(n, a) => self.splat(&n.clone(), &a.clone()),
        }
    }

    pub(crate) fn empty(&mut self, a: &ShapedArray) -> String {
        self.e.op(&format!("tensor.empty() : {}", a.mlir_tensor()))
    }

    /// A tensor of `a` filled with the scalar SSA value `s`.
    pub(crate) fn splat(&mut self, s: &str, a: &ShapedArray) -> String {
        if a.size() == 0 {
            return self.empty(a);
        }
        let e = self.empty(a);
        let t = a.mlir_tensor();
        self.e.op(&format!("linalg.fill ins({s} : {}) outs({e} : {t}) -> {t}", a.dtype.mlir()))
    }
}
