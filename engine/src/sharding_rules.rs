//! Sharding propagation: each primitive's output shardings from its inputs' (JAX's
//! per-primitive `sharding_rule`s in `jax/_src/lax/lax.py`), for eager ops on sharded
//! arrays and over whole jaxprs for jitted calls.
//!
//! The rules, per dimension of a `PartitionSpec` (the mesh axes a dimension is split over):
//! * elementwise ops (every non-0-d input has the output's shape, e.g. `add`, `sin`,
//!   `select_n`, `convert_element_type`): a dimension takes the axes of the inputs that
//!   shard it; two inputs sharding one dimension over different axes is JAX's
//!   `… got incompatible shardings for broadcasting` error;
//! * `broadcast_in_dim`: operand dims keep their axes at their new positions, new and
//!   size-1-broadcast dims are unsharded; `transpose` permutes; `reshape` keeps the axes of
//!   dims that are unchanged or the major dim of a split/merge group (else JAX-like error);
//! * reductions (`reduce_sum` … `argmax`) drop the reduced dims: a reduction over a sharded
//!   dim is a partial result per device that an all-reduce completes, so the result is
//!   replicated along those axes (`float32[8@X,4@Y]`.sum(0) → `float32[4@Y]`);
//! * `dot_general`: batch dims from the operands' batch dims, then lhs and rhs free dims;
//!   contracting dims sharded differently, or sharded at all without an `out_sharding`,
//!   are JAX's errors; with an `out_sharding` parameter the result has that layout;
//! * loops: carries keep their initial values' layout; a body giving one back with another
//!   layout over `Explicit` axes is JAX's carry type error;
//! * any result that uses one mesh axis twice is JAX's `… produces an illegally sharded
//!   result` error;
//! * nested jaxprs (`pjit`, custom-derivative calls, `checkpoint`) are propagated through;
//!   other primitives (gather, scatter, convolutions, control flow) give replicated
//!   results.
//!
//! Errors are `ShardingTypeError`s, raised only when the axes involved are `Explicit`: over
//! `Auto` axes the layout is the compiler's choice and a conflicting dimension is left
//! unsharded instead (as XLA would choose for us).

use crate::error::{Error, ErrorKind, Result};
use crate::ir::{Atom, CallbackId, Jaxpr, Primitive, ShapedArray};
use crate::sharding::{AxisType, Device, MemoryKind, Mesh, NamedSharding, PEntry, PartitionSpec, PutTarget, Sharding, SingleDeviceSharding};
use crate::trace::Array;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Per dimension: the mesh axes it is split over (major to minor).
pub(crate) type Dims = Vec<Vec<String>>;

/// `spec` padded with unsharded dims to `ndim`.
pub(crate) fn dims_of(spec: &PartitionSpec, ndim: usize) -> Dims {
    (0..ndim).map(|d| spec.axes(d).to_vec()).collect()
}

/// The `PartitionSpec` of `dims`, trailing unsharded dims dropped (as JAX prints
/// `P('x',)` for a `[8@x,4]` result... JAX keeps `None`s given explicitly; propagated specs
/// keep one entry per dimension, as `P('X', None)`).
pub(crate) fn spec_of(dims: &Dims) -> PartitionSpec {
    PartitionSpec::from_entries(dims.iter().map(|a| PEntry(a.clone())).collect())
}

/// A dimension's spec entry as Python prints it inside a tuple: `'X'`, `None`, `('X', 'Y')`.
fn entry_text(axes: &[String]) -> String {
    match axes.len() {
        0 => "None".to_string(),
        1 => format!("'{}'", axes[0]),
        _ => format!("({})", axes.iter().map(|a| format!("'{a}'")).collect::<Vec<_>>().join(", ")),
    }
}

/// A tuple of entries as Python prints it: `('X',)`, `('X', None)`, `()`.
fn tuple_text(entries: &[&Vec<String>]) -> String {
    let v: Vec<String> = entries.iter().map(|e| entry_text(e)).collect();
    if v.len() == 1 {
        format!("({},)", v[0])
    } else {
        format!("({})", v.join(", "))
    }
}

/// The short type with explicit axes, as JAX's sharding errors print it: `i32[4@X,4]`.
fn short_type(aval: &ShapedArray, dims: &Dims) -> String {
    let parts: Vec<String> = aval
        .shape
        .iter()
        .enumerate()
        .map(|(d, n)| match dims.get(d).map(|a| a.len()).unwrap_or(0) {
            0 => n.to_string(),
            1 => format!("{n}@{}", dims[d][0]),
            _ => format!("{n}@({})", dims[d].join(",")),
        })
        .collect();
    format!("{}[{}]", aval.dtype.short_name(), parts.join(","))
}

/// Whether every axis in `axes` is `Explicit` on `mesh` (errors are raised only then).
fn all_explicit<'a>(mesh: &Mesh, mut axes: impl Iterator<Item = &'a String>) -> bool {
    axes.all(|a| mesh.axis_type(a) == Some(AxisType::Explicit))
}

fn sharding_error(msg: String) -> Error {
    Error::new(ErrorKind::ShardingType, msg)
}

/// Merges the inputs' dims of an elementwise op of output rank `ndim`.
fn elementwise(name: &str, mesh: &Mesh, ins: &[(&ShapedArray, &Dims)], out: &ShapedArray) -> Result<Dims> {
    let mut res: Dims = vec![vec![]; out.ndim()];
    for d in 0..out.ndim() {
        let mut chosen: Option<&Vec<String>> = None;
        for (a, dims) in ins {
            if a.ndim() != out.ndim() {
                continue;
            }
            let e = &dims[d];
            if e.is_empty() {
                continue;
            }
            match chosen {
                None => chosen = Some(e),
                Some(c) if c == e => {}
                Some(c) => {
                    if all_explicit(mesh, c.iter().chain(e.iter())) {
                        let specs: Vec<String> = ins
                            .iter()
                            .filter(|(a, _)| a.ndim() == out.ndim())
                            .map(|(_, dims)| tuple_text(&dims.iter().collect::<Vec<_>>()))
                            .collect();
                        return Err(sharding_error(format!("{name} got incompatible shardings for broadcasting: {}.", specs.join(", "))));
                    }
                    chosen = None;
                    res[d] = vec![];
                    break;
                }
            }
        }
        if let Some(c) = chosen {
            res[d] = c.clone();
        }
    }
    check_unique(name, mesh, ins, out, res)
}

/// JAX's check that a result uses each mesh axis at most once.
fn check_unique(name: &str, mesh: &Mesh, ins: &[(&ShapedArray, &Dims)], out: &ShapedArray, mut res: Dims) -> Result<Dims> {
    let mut seen: Vec<&String> = vec![];
    let mut dup: Option<String> = None;
    for e in &res {
        for a in e {
            if seen.contains(&a) {
                dup = Some(a.clone());
            }
            seen.push(a);
        }
    }
    if let Some(a) = dup {
        if all_explicit(mesh, std::iter::once(&a)) {
            let ins_text: Vec<String> = ins.iter().map(|(a, d)| short_type(a, d)).collect();
            return Err(sharding_error(format!(
                "{name} operation with inputs: {} produces an illegally sharded result: {}",
                ins_text.join(", "),
                short_type(out, &res)
            )));
        }
        // Auto: keep the first use only.
        let mut seen: Vec<String> = vec![];
        for e in res.iter_mut() {
            e.retain(|x| {
                let fresh = !seen.contains(x);
                seen.push(x.clone());
                fresh
            });
        }
    }
    Ok(res)
}

/// The output dims of one equation `prim` on inputs of `in_avals` sharded as `ins`.
/// `out_avals` are the primitive's result types. Errors: JAX's sharding type errors for
/// `Explicit` axes (see the module docs).
pub(crate) fn eqn_rule(prim: &Primitive, mesh: &Mesh, in_avals: &[&ShapedArray], ins: &[Dims], out_avals: &[ShapedArray]) -> Result<Vec<Dims>> {
    let replicated = || out_avals.iter().map(|a| vec![vec![]; a.ndim()]).collect::<Vec<Dims>>();
    if let Primitive::ShardingConstraint { sharding } = prim {
        // The constraint's layout on its mesh (or on that mesh with other axis types, as
        // `explicit_axes` nested in `auto_axes` constrains); on another mesh the operand's.
        return Ok(vec![match (sharding.mesh.same_grid(mesh), out_avals.first(), ins.first()) {
            (true, Some(a), _) => dims_of(&sharding.spec, a.ndim()),
            (false, _, Some(d)) => d.clone(),
            _ => return Ok(replicated()),
        }]);
    }
    if let Primitive::DebugCallback { callback, .. } = prim {
        if let Some(d) = ins.first() {
            let spec = spec_of(d);
            let spec = if d.iter().all(|e| e.is_empty()) { PartitionSpec::default() } else { spec };
            fire_inspect(*callback, Sharding::Named(NamedSharding { mesh: mesh.clone(), spec, memory_kind: MemoryKind::Device }));
        }
        return Ok(vec![]);
    }
    if ins.iter().all(|d| d.iter().all(|e| e.is_empty())) {
        return Ok(replicated());
    }
    let pairs: Vec<(&ShapedArray, &Dims)> = in_avals.iter().copied().zip(ins.iter()).collect();
    let name = prim.name();
    use Primitive::*;
    match prim {
        BroadcastInDim { shape, broadcast_dimensions } => {
            let mut res: Dims = vec![vec![]; shape.len()];
            for (i, &od) in broadcast_dimensions.iter().enumerate() {
                if in_avals[0].shape[i] == shape[od] {
                    res[od] = ins[0][i].clone();
                }
            }
            Ok(vec![res])
        }
        Transpose { permutation } => Ok(vec![permutation.iter().map(|&p| ins[0][p].clone()).collect()]),
        Reshape { new_sizes } => Ok(vec![reshape_rule(mesh, in_avals[0], &ins[0], new_sizes)?]),
        ReduceSum { axes } | ReduceMax { axes } | ReduceMin { axes } | ReduceProd { axes } | ReduceAnd { axes } | ReduceOr { axes } | ArgMax { axes, .. } => {
            let res: Dims = ins[0].iter().enumerate().filter(|(d, _)| !axes.contains(d)).map(|(_, e)| e.clone()).collect();
            Ok(vec![res])
        }
        DotGeneral { lhs_contracting, rhs_contracting, lhs_batch, rhs_batch, out_sharding, .. } => {
            let (l, r) = (&ins[0], &ins[1]);
            // The out sharding given (on this mesh): the result's layout, contracting dims
            // sharded alike allowed (their partial products are combined to it).
            let given = out_sharding
                .as_ref()
                .filter(|s| s.0.len() <= out_avals[0].ndim() && s.0.iter().flat_map(|e| e.0.iter()).all(|a| mesh.axis_size(a).is_some()))
                .map(|s| dims_of(s, out_avals[0].ndim()));
            let lc: Vec<&Vec<String>> = lhs_contracting.iter().map(|&d| &l[d]).collect();
            let rc: Vec<&Vec<String>> = rhs_contracting.iter().map(|&d| &r[d]).collect();
            let involved = lc.iter().chain(rc.iter()).flat_map(|e| e.iter());
            let explicit = all_explicit(mesh, involved.clone());
            let any_c = involved.clone().next().is_some();
            if explicit && lc != rc {
                return Err(sharding_error(format!(
                    "Contracting dimensions are sharded differently for lhs and rhs. Make sure both operands have the same sharding for contracting dimensions. Got lhs_contracting_spec={} and rhs_contracting_spec={}",
                    tuple_text(&lc),
                    tuple_text(&rc)
                )));
            }
            if let Some(d) = given {
                return Ok(vec![check_unique(name, mesh, &pairs, &out_avals[0], d)?]);
            }
            if explicit && any_c && !out_sharding_override() {
                return Err(sharding_error(format!(
                    "Contracting dimensions are sharded and it is ambiguous how the output should be sharded. Please specify the output sharding via the `out_sharding` parameter. Got lhs_contracting_spec={} and rhs_contracting_spec={}",
                    tuple_text(&lc),
                    tuple_text(&rc)
                )));
            }
            let mut res: Dims = vec![];
            for (&lb, &rb) in lhs_batch.iter().zip(rhs_batch) {
                let (a, b) = (&l[lb], &r[rb]);
                if a == b || b.is_empty() {
                    res.push(a.clone());
                } else if a.is_empty() {
                    res.push(b.clone());
                } else if all_explicit(mesh, a.iter().chain(b.iter())) {
                    return Err(sharding_error(format!(
                        "dot_general requires lhs batch dimensions and rhs batch dimensions to have the consistent sharding, got {} and {}.",
                        tuple_text(&lhs_batch.iter().map(|&d| &l[d]).collect::<Vec<_>>()),
                        tuple_text(&rhs_batch.iter().map(|&d| &r[d]).collect::<Vec<_>>())
                    )));
                } else {
                    res.push(vec![]);
                }
            }
            for d in 0..l.len() {
                if !lhs_contracting.contains(&d) && !lhs_batch.contains(&d) {
                    res.push(l[d].clone());
                }
            }
            for d in 0..r.len() {
                if !rhs_contracting.contains(&d) && !rhs_batch.contains(&d) {
                    res.push(r[d].clone());
                }
            }
            Ok(vec![check_unique(name, mesh, &pairs, &out_avals[0], res)?])
        }
        Pjit { jaxpr, .. } if jaxpr.jaxpr.invars.len() == ins.len() => jaxpr_rule(&jaxpr.jaxpr, mesh, ins),
        CustomJvpCall { call_jaxpr, .. } | CustomVjpCall { call_jaxpr, .. } if call_jaxpr.invars.len() == ins.len() => jaxpr_rule(call_jaxpr, mesh, ins),
        Checkpoint { jaxpr, .. } if jaxpr.invars.len() == ins.len() => jaxpr_rule(jaxpr, mesh, ins),
        // Loops and `cond`: the bodies are propagated too (so a body's equations get the
        // same sharding type errors as top-level ones, at their own lines); carries keep
        // their operands' layout and `scan`'s ys stack the body's (whole along the scanned
        // dim), as the jaxpr's types print them (`sharding_types`).
        Scan { jaxpr, num_consts, num_carry, .. } if jaxpr.invars.len() == ins.len() && *num_consts + *num_carry <= ins.len() => {
            let (nc, nk) = (*num_consts, *num_carry);
            let body_in: Vec<Dims> = ins.iter().enumerate().map(|(i, d)| if i < nc + nk { d.clone() } else { d.get(1..).unwrap_or(&[]).to_vec() }).collect();
            let outs = jaxpr_rule(jaxpr, mesh, &body_in)?;
            let carry_avals: Vec<&ShapedArray> = jaxpr.invars.iter().skip(nc).take(nk).map(|v| &v.aval).collect();
            check_carry("scan body", mesh, &carry_avals, &ins[nc..nc + nk], outs.get(..nk).unwrap_or(&[]))?;
            let mut res: Vec<Dims> = ins[nc..nc + nk].to_vec();
            res.extend(outs.into_iter().skip(nk).map(|d| std::iter::once(vec![]).chain(d).collect()));
            Ok(fit_outs(res, out_avals))
        }
        While { cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts } if *cond_nconsts + *body_nconsts <= ins.len() => {
            let (cc, bc) = (*cond_nconsts, *body_nconsts);
            let carry = &ins[cc + bc..];
            if body_jaxpr.invars.len() == ins.len() - cc {
                let outs = jaxpr_rule(body_jaxpr, mesh, &ins[cc..])?;
                let carry_avals: Vec<&ShapedArray> = body_jaxpr.invars.iter().skip(bc).map(|v| &v.aval).collect();
                check_carry("while_loop body", mesh, &carry_avals, carry, &outs)?;
            }
            let cond_in: Vec<Dims> = ins[..cc].iter().chain(carry).cloned().collect();
            if cond_jaxpr.invars.len() == cond_in.len() {
                jaxpr_rule(cond_jaxpr, mesh, &cond_in)?;
            }
            Ok(fit_outs(carry.to_vec(), out_avals))
        }
        Cond { branches } if !ins.is_empty() => {
            let mut first = None;
            for j in branches.iter().filter(|j| j.invars.len() == ins.len() - 1) {
                let o = jaxpr_rule(j, mesh, &ins[1..])?;
                first = first.or(Some(o));
            }
            Ok(fit_outs(first.unwrap_or_default(), out_avals))
        }
        _ => {
            let elementwise_shaped = out_avals.len() == 1
                && out_avals[0].ndim() > 0
                && in_avals.iter().all(|a| a.ndim() == 0 || a.shape == out_avals[0].shape)
                && !matches!(prim, Cond { .. } | While { .. } | Scan { .. });
            if elementwise_shaped {
                Ok(vec![elementwise(name, mesh, &pairs, &out_avals[0])?])
            } else {
                Ok(replicated())
            }
        }
    }
}

/// JAX's check that a loop body gives back its carries with the shardings they came in
/// with (a carry's type is fixed by its initial value): a carry whose layout over
/// `Explicit` axes differs between `ins` (the carries' initial layouts) and `outs` (the
/// body's results), e.g. an unsharded `float32[16]` init that the body combines with a
/// `float32[16@x]` operand, is JAX 0.10.2's `TypeError` (its text, and a hint). Differences
/// over `Auto` axes are no error: the result keeps the initial value's layout.
fn check_carry(name: &str, mesh: &Mesh, avals: &[&ShapedArray], ins: &[Dims], outs: &[Dims]) -> Result<()> {
    let explicit = |d: &Dims| -> Dims { d.iter().map(|e| e.iter().filter(|a| all_explicit(mesh, std::iter::once(*a))).cloned().collect()).collect() };
    let long = |a: &ShapedArray, d: &Dims| format!("{}{}", a.dtype.name(), &short_type(a, d)[a.dtype.short_name().len()..]);
    let diffs: Vec<String> = avals
        .iter()
        .zip(ins.iter().zip(outs))
        .enumerate()
        .filter(|(_, (a, (i, o)))| i.len() == a.ndim() && o.len() == a.ndim() && explicit(i) != explicit(o))
        .map(|(k, (a, (i, o)))| {
            format!("the input carry component carry[{k}] has type {} but the corresponding output carry component has type {}", long(a, &explicit(i)), long(a, &explicit(o)))
        })
        .collect();
    if diffs.is_empty() {
        return Ok(());
    }
    let differences = if diffs.len() == 1 {
        let mut c = diffs[0].chars();
        let first = c.next().map(|f| f.to_uppercase().collect::<String>()).unwrap_or_default();
        format!("{first}{}.\n", c.as_str())
    } else {
        let n = diffs.len();
        diffs.iter().enumerate().map(|(k, d)| if k + 1 < n { format!("  * {d};\n") } else { format!("  * {d}.\n") }).collect::<Vec<_>>().join("\n")
    };
    Err(Error::type_error(format!(
        "{name} function carry input and carry output must have equal types, but they differ:\n\n{differences}\nRevise the function so that all output types match the corresponding input types. \
         For shardings: give the initial carry the sharding the body gives back (`reshard(init, P(..))` before the loop), or reshard the body's result to the carry's (`reshard(out, P(..))` at the end of the body)."
    )))
}

/// `res` as one layout per result of `out_avals`: a layout of the wrong rank (or a count
/// that does not match) is replicated.
fn fit_outs(res: Vec<Dims>, out_avals: &[ShapedArray]) -> Vec<Dims> {
    if res.len() != out_avals.len() {
        return out_avals.iter().map(|a| vec![vec![]; a.ndim()]).collect();
    }
    res.into_iter().zip(out_avals).map(|(d, a)| if d.len() == a.ndim() { d } else { vec![vec![]; a.ndim()] }).collect()
}

/// `reshape`: dims are grouped into runs whose sizes multiply to the same number; a run
/// of one dim to one dim keeps its axes; a split (one dim to several) or merge (several to
/// one) keeps the major dim's axes when the pieces divide evenly. Anything else that is
/// sharded over `Explicit` axes is an error (reshard first), over `Auto` axes replicated.
fn reshape_rule(mesh: &Mesh, a: &ShapedArray, dims: &Dims, new: &[usize]) -> Result<Dims> {
    let old = &a.shape;
    let mut res: Dims = vec![vec![]; new.len()];
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < new.len() {
        // One group: [i0, i) of old and [j0, j) of new with equal products.
        let (i0, j0) = (i, j);
        let (mut po, mut pn) = (1usize, 1usize);
        if i < old.len() {
            po *= old[i];
            i += 1;
        }
        if j < new.len() {
            pn *= new[j];
            j += 1;
        }
        while po != pn {
            if po < pn && i < old.len() {
                po *= old[i];
                i += 1;
            } else if j < new.len() {
                pn *= new[j];
                j += 1;
            } else {
                break;
            }
        }
        let sharded: Vec<usize> = (i0..i).filter(|&d| !dims[d].is_empty()).collect();
        if sharded.is_empty() {
            continue;
        }
        let parts = |d: usize| dims[d].iter().map(|x| mesh.axis_size(x).unwrap_or(1)).product::<usize>();
        let ok = sharded == vec![i0] && j > j0 && new[j0] % parts(i0) == 0;
        if ok {
            res[j0] = dims[i0].clone();
        } else if all_explicit(mesh, sharded.iter().flat_map(|&d| dims[d].iter())) {
            return Err(sharding_error(format!(
                "reshape of an array of type {} to shape {:?} would move data between devices: a sharded dimension must stay the major dimension of its group. Use `reshard` to change the sharding first.",
                short_type(a, dims),
                new
            )));
        }
    }
    Ok(res)
}

/// Propagates `ins` (the invars' dims) through `jaxpr`; returns the outvars' dims.
/// Constvars are replicated.
pub(crate) fn jaxpr_rule(jaxpr: &Jaxpr, mesh: &Mesh, ins: &[Dims]) -> Result<Vec<Dims>> {
    let mut env: HashMap<u32, Dims> = HashMap::new();
    for (v, d) in jaxpr.invars.iter().zip(ins) {
        env.insert(v.id, d.clone());
    }
    let get = |env: &HashMap<u32, Dims>, a: &Atom| -> Dims {
        match a {
            Atom::Var(v) => env.get(&v.id).cloned().unwrap_or_else(|| vec![vec![]; v.aval.ndim()]),
            _ => vec![],
        }
    };
    for e in &jaxpr.eqns {
        if let Primitive::ShardMap(sm) = &e.primitive {
            // Results laid out as the out_specs (on its own mesh; replicated on another).
            for (v, s) in e.outputs.iter().zip(&sm.out_specs) {
                env.insert(v.id, if sm.mesh.same_grid(mesh) { dims_of(s, v.aval.ndim()) } else { vec![vec![]; v.aval.ndim()] });
            }
            continue;
        }
        let in_dims: Vec<Dims> = e.inputs.iter().map(|a| get(&env, a)).collect();
        let in_avals: Vec<ShapedArray> = e.inputs.iter().map(|a| a.aval().clone()).collect();
        let refs: Vec<&ShapedArray> = in_avals.iter().collect();
        let out_avals: Vec<ShapedArray> = e.outputs.iter().map(|v| v.aval.clone()).collect();
        let outs = eqn_rule(&e.primitive, mesh, &refs, &in_dims, &out_avals).map_err(|err| err.at(e.source.clone()))?;
        for (v, d) in e.outputs.iter().zip(outs) {
            env.insert(v.id, d);
        }
    }
    Ok(jaxpr.outvars.iter().map(|a| get(&env, a)).collect())
}

// ---------------------------------------------------------------- out_sharding override

thread_local! {
    static OUT_SHARDING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The `out_sharding` the contraction being bound gets as its parameter.
    static DOT_OUT_SHARDING: std::cell::RefCell<Option<PartitionSpec>> = const { std::cell::RefCell::new(None) };
}

/// The `out_sharding` parameter for a `dot_general` bound now (set by `dot_out_sharding`).
pub(crate) fn dot_out_sharding_in_scope() -> Option<PartitionSpec> {
    DOT_OUT_SHARDING.with(|c| c.borrow().clone())
}

/// Whether an `out_sharding` was given for the contraction being bound (set by
/// `numpy::dot_out_sharding` around its eager `dot_general`).
fn out_sharding_override() -> bool {
    OUT_SHARDING.with(|c| c.get())
}

/// Runs `f` with contractions allowed to have sharded contracting dims (their result is
/// then resharded to the caller's `out_sharding`).
pub(crate) fn with_out_sharding<T>(f: impl FnOnce() -> T) -> T {
    let prev = OUT_SHARDING.with(|c| c.replace(true));
    let r = f();
    OUT_SHARDING.with(|c| c.set(prev));
    r
}

// ---------------------------------------------------------------- public API

/// `jax.lax.with_sharding_constraint(x, sharding)`: `x` laid out as `target` (a
/// `NamedSharding`, or a `PartitionSpec` on the mesh set by `set_mesh`). On concrete arrays
/// it moves the shards now (`device_put`). Inside `jit` it stages a `sharding_constraint`
/// equation: the propagation gives its result that layout and the partitioner reshards
/// to it (values unchanged); a device target, or a spec with no mesh set, leaves `x`
/// unchanged there. In explicit-sharding mode (JAX's rules): when every axis of the
/// context mesh (`get_abstract_mesh()`) is `Explicit` it only asserts that `x` already has
/// that layout (`reshard` moves data); otherwise its spec may name only `Auto` axes.
/// Errors: as `device_put` (no mesh set, divisibility); inside `jit`, a spec longer than
/// `x`'s rank (`ValueError`); `AssertionError` for a layout that differs on an
/// all-`Explicit` mesh (JAX's text), and `ValueError` "The spec of
/// NamedSharding passed to with_sharding_constraint can only refer to Auto axes …".
pub fn with_sharding_constraint(x: &Array, target: impl Into<PutTarget>) -> Result<Array> {
    let target = target.into();
    if matches!(target, PutTarget::Spec(_)) && crate::sharding::get_mesh().is_none() {
        // JAX 0.10.2's text.
        return Err(Error::runtime(
            "with_sharding_constraint requires a non-empty mesh in context if you are passing `PartitionSpec`s to shardings. You can define a context mesh via `set_mesh(&mesh)`. Alternatively, provide `Sharding`s to shardings and then the mesh context manager is not required.",
        ));
    }
    let ctx = crate::sharding_axes::get_abstract_mesh().0;
    let given = match &target {
        PutTarget::Sharding(Sharding::Named(ns)) => Some(ns.clone()),
        PutTarget::Spec(spec) => match crate::sharding::get_mesh() {
            Some(m) => Some(NamedSharding::new(&m, spec.clone())?),
            None => None,
        },
        _ => None,
    };
    if let (Some(ctx), Some(ns)) = (&ctx, &given) {
        if ctx.axis_types().iter().all(|t| *t == AxisType::Explicit) && ns.spec.0.len() <= x.ndim() {
            // An assert, not a constraint (JAX 0.10.2's text).
            let have = crate::sharding::typeof_(x).sharding.map(|s| s.spec).unwrap_or_default();
            let (have, want) = (padded(&have, x.ndim()), padded(&ns.spec, x.ndim()));
            if have != want {
                return Err(Error::new(ErrorKind::Assertion, format!(
                    "`with_sharding_constraint` acts as an assert when all axes of mesh are of type `Explicit`. The array sharding: {have:?} did not match the sharding provided: {want:?}. Please use `jax.sharding.reshard` to shard your input to the sharding you want."
                )));
            }
            return Ok(x.clone());
        }
    }
    if let Some(ns) = &given {
        let mesh = crate::sharding_axes::axes_in_scope(&ns.mesh);
        if ns.spec.0.iter().any(|e| e.0.iter().any(|a| mesh.axis_type(a) == Some(AxisType::Explicit))) {
            return Err(Error::value_error(format!(
                "The spec of NamedSharding passed to with_sharding_constraint can only refer to Auto axes of the mesh. Got spec={:?} and mesh={}. You probably meant to use `reshard` API?",
                ns.spec,
                crate::sharding_axes::AbstractMesh(Some(mesh.clone()))
            )));
        }
    }
    constrain(x, target)
}

/// `spec` with `None` entries up to `rank` (JAX shows `P(None,)` for a rank-1 array).
fn padded(spec: &PartitionSpec, rank: usize) -> PartitionSpec {
    let mut e = spec.0.clone();
    while e.len() < rank {
        e.push(PEntry(Vec::new()));
    }
    PartitionSpec::from_entries(e)
}

/// `x` laid out as `target` with no explicit-mode rules: on concrete arrays `device_put`,
/// inside `jit` a `sharding_constraint` equation (a device target, or a spec with no mesh
/// set, leaves `x` unchanged there). The engine's own constraints (`auto_axes`, `reshard`)
/// go through this. Errors: as `device_put`; inside `jit`, a spec longer than `x`'s rank.
pub(crate) fn constrain(x: &Array, target: impl Into<PutTarget>) -> Result<Array> {
    let target = target.into();
    if x.is_tracer() {
        let ns = match target {
            PutTarget::Sharding(Sharding::Named(ns)) => ns,
            PutTarget::Spec(spec) => match crate::sharding::get_mesh() {
                Some(m) => NamedSharding::new(&m, spec)?,
                None => return Ok(x.clone()),
            },
            _ => return Ok(x.clone()),
        };
        if ns.spec.0.len() > x.ndim() {
            return Err(Error::value_error(format!(
                "One of with_sharding_constraint arguments is incompatible with its sharding annotation {ns:?}: Sharding {ns:?} is only valid for values of rank at least {}, but was applied to a value of rank {}.",
                ns.spec.0.len(),
                x.ndim()
            )));
        }
        return crate::lax::bind1(Primitive::ShardingConstraint { sharding: ns }, vec![crate::trace::Operand::Array(x.clone())]);
    }
    crate::sharding::device_put(x, target)
}

/// `jax.reshard(x, out_sharding)`: `x` with a new sharding (a `NamedSharding`, or a
/// `PartitionSpec` on the current mesh), moving data between the mesh's devices as needed.
/// Values are unchanged. Inside `jit`, a `sharding_constraint`. Errors: as `device_put`;
/// a spec naming an `Auto` or `Manual` axis (JAX's `ValueError: PartitionSpec passed to
/// reshard cannot contain axis names that are of type Auto or Manual …`: use
/// `with_sharding_constraint` there); `x` committed to devices other than the mesh's
/// (JAX's `ValueError: Received incompatible devices …`: `device_put` moves it).
pub fn reshard(x: &Array, target: impl Into<PutTarget>) -> Result<Array> {
    let target = target.into();
    if let (PutTarget::Spec(spec), None) = (&target, crate::sharding::get_mesh()) {
        // JAX 0.10.2's text.
        return Err(Error::value_error(format!(
            "Using PartitionSpec when you are not under a mesh context is not allowed. Please pass a NamedSharding instance or enter into a mesh context via `set_mesh`. Got {spec:?}"
        )));
    }
    let given = match &target {
        PutTarget::Sharding(Sharding::Named(ns)) => Some((ns.mesh.clone(), ns.spec.clone())),
        PutTarget::Spec(spec) => crate::sharding::get_mesh().map(|m| (m, spec.clone())),
        _ => None,
    };
    if let Some((m, spec)) = given {
        let scoped = crate::sharding_axes::axes_in_scope(&m);
        for a in spec.0.iter().flat_map(|e| e.0.iter()) {
            if let Some(t) = scoped.axis_type(a) {
                if t != AxisType::Explicit {
                    // JAX 0.10.2's text.
                    return Err(Error::value_error(format!(
                        "PartitionSpec passed to reshard cannot contain axis names that are of type Auto or Manual. Got PartitionSpec: {spec:?} with axis name: {a} of type: AxisType.{t:?}."
                    )));
                }
            }
        }
        crate::sharding::check_reshard_devices(x, &m)?;
    }
    constrain(x, target)
}

/// `jnp.dot(a, b, out_sharding=spec)`: the product, laid out as `out_sharding`. This is
/// how a contraction over sharded dims says where its result goes: without it, JAX's
/// `Contracting dimensions are sharded and it is ambiguous …` error. On concrete arrays
/// the result is on the operands' mesh (the mesh set by `set_mesh` when neither operand
/// is sharded). Under `jit` the spec is the `dot_general`'s `out_sharding` parameter
/// (shown in the jaxpr), resolved on the mesh of the call's sharded arguments: the
/// jaxpr's result type is `f32[8@X,4]` for `P('X', None)`, and the partitioner combines
/// each device's partial product with an all-reduce (`psum`) or, when the spec splits a
/// free dim over the contracted axes, a `reduce_scatter`.
/// Errors: shape errors of `dot`; as `device_put` for the spec; under `jit`, a spec
/// longer than the result's rank (`ValueError`).
pub fn dot_out_sharding(a: &Array, b: &Array, out_sharding: PartitionSpec) -> Result<Array> {
    // The contraction carries its out sharding as a parameter (JAX's `dot_general[..
    // out_sharding=P(..)]`): under `jit` the propagation (on the mesh of the call's
    // arguments), the jaxpr's types and the partitioner use it.
    let prev = DOT_OUT_SHARDING.with(|c| c.replace(Some(out_sharding.clone())));
    let out = with_out_sharding(|| crate::numpy::dot(a, b));
    DOT_OUT_SHARDING.with(|c| *c.borrow_mut() = prev);
    let out = out?;
    if out.is_tracer() {
        if out_sharding.0.len() > out.ndim() {
            return Err(Error::value_error(format!("dot_out_sharding: out_sharding {out_sharding:?} has more entries than the result's rank {}", out.ndim())));
        }
        return Ok(out);
    }
    let mesh = [a, b]
        .iter()
        .find_map(|x| x.sharding().ok().and_then(|s| s.mesh().cloned()))
        .or_else(crate::sharding::get_mesh)
        .ok_or_else(|| Error::value_error("dot_out_sharding needs sharded operands or a mesh set with set_mesh"))?;
    crate::sharding::device_put(&out, crate::sharding::NamedSharding::new(&mesh, out_sharding)?)
}

type InspectFn = Arc<dyn Fn(&Sharding) + Send + Sync>;

fn inspect_registry() -> &'static Mutex<HashMap<CallbackId, InspectFn>> {
    static R: OnceLock<Mutex<HashMap<CallbackId, InspectFn>>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(HashMap::new()))
}

/// `jax.debug.inspect_array_sharding(x, callback=f)`: calls `f` with `x`'s sharding. On a
/// concrete array at once; inside `jit`, with the sharding propagated to `x` from the
/// call's arguments, each time the jitted function is called (JAX calls it once per
/// compilation); with unsharded arguments, with the `SingleDeviceSharding` the call runs on.
/// Errors: tracing errors.
#[track_caller]
pub fn inspect_array_sharding(x: &Array, callback: impl Fn(&Sharding) + Send + Sync + 'static) -> Result<()> {
    if !x.is_tracer() {
        callback(&x.sharding()?);
        return Ok(());
    }
    let loc = std::panic::Location::caller();
    let id = crate::runtime::callbacks::register(Arc::new(|_: &[crate::runtime::Buffer]| {}));
    inspect_registry().lock().unwrap_or_else(|e| e.into_inner()).insert(id, Arc::new(callback));
    crate::trace::bind(
        Primitive::DebugCallback { callback: id, fmt: "inspect_array_sharding".to_string() },
        vec![crate::trace::Operand::Array(x.clone())],
        loc,
    )?;
    Ok(())
}

/// Calls the inspect callback `id` (if it is one) with `sharding`.
fn fire_inspect(id: CallbackId, sharding: Sharding) {
    let f = inspect_registry().lock().unwrap_or_else(|e| e.into_inner()).get(&id).cloned();
    if let Some(f) = f {
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&sharding))).is_err() {
            eprintln!("jax: inspect_array_sharding callback panicked");
        }
    }
}

/// For a jitted call without sharded inputs: each `inspect_array_sharding` in `jaxpr` (and
/// its nested calls) sees the device the call runs on.
pub(crate) fn inspect_unsharded(jaxpr: &Jaxpr, device: u32) {
    for e in &jaxpr.eqns {
        match &e.primitive {
            Primitive::DebugCallback { callback, .. } => {
                fire_inspect(*callback, Sharding::Single(SingleDeviceSharding::new(Device { id: device })))
            }
            Primitive::Pjit { jaxpr, .. } => inspect_unsharded(&jaxpr.jaxpr, device),
            Primitive::CustomJvpCall { call_jaxpr: j, .. } | Primitive::CustomVjpCall { call_jaxpr: j, .. } | Primitive::Checkpoint { jaxpr: j, .. } => {
                inspect_unsharded(j, device)
            }
            _ => {}
        }
    }
}

// ---------------------------------------------------------------- lowered-text annotations

/// The shardings of a traced call's arguments and results, for the lowered text
/// (`Lowered::as_text`) and the compiled text's header (`Compiled::as_text`).
#[derive(Clone, Debug)]
pub(crate) struct Annotations {
    mesh: Mesh,
    ins: Vec<Dims>,
    outs: Vec<Dims>,
    /// No argument is on the mesh (only `out_shardings` names it): the arguments get no
    /// `sdy.sharding` (JAX leaves an unspecified input sharding off), and the call is not
    /// partitioned (it runs on one device; its results are then laid out as asked).
    bare_ins: bool,
}

impl Annotations {
    /// The mesh the call is annotated on.
    pub(crate) fn mesh(&self) -> &Mesh {
        &self.mesh
    }
    /// Per argument, the dims it is split as.
    pub(crate) fn ins(&self) -> &[Dims] {
        &self.ins
    }
    /// Whether only `out_shardings` put the call on the mesh (no argument is on it).
    pub(crate) fn bare_ins(&self) -> bool {
        self.bare_ins
    }
}

/// The mesh and layout an `out_shardings` target gives a result of rank `ndim`: a
/// `NamedSharding` (any memory kind), or a bare `PartitionSpec` on the mesh `set_mesh` set.
fn target_dims(t: &PutTarget, ndim: usize) -> Option<(Mesh, Dims)> {
    let (mesh, spec) = match t {
        PutTarget::Sharding(Sharding::Named(ns)) => (ns.mesh.clone(), ns.spec.clone()),
        PutTarget::Spec(s) => (crate::sharding::get_mesh()?, s.clone()),
        _ => return None,
    };
    (spec.0.len() <= ndim).then(|| (mesh, dims_of(&spec, ndim)))
}

/// `a` (the annotations from the arguments, if any) with the results laid out as a jitted
/// function's `out_shardings` (`targets`, one per result or one for all) asks, as JAX
/// lowers them: a result whose target is a `NamedSharding` on the annotated mesh gets that
/// target's `sdy.sharding`. Without argument annotations, the first named target's mesh
/// annotates the module (`mhlo.num_partitions`, `sdy.mesh`, results' `sdy.sharding`; the
/// arguments get none: `bare_ins`) when it has more than one device; results without a
/// named target there are replicated.
pub(crate) fn with_out_shardings(a: Option<Annotations>, jaxpr: &crate::ir::ClosedJaxpr, targets: Option<&Vec<PutTarget>>) -> Option<Annotations> {
    let Some(t) = targets.filter(|t| !t.is_empty()) else { return a };
    let avals = jaxpr.jaxpr.out_avals();
    let target = |i: usize| t.get(i).or(if t.len() == 1 { t.first() } else { None });
    let mut a = match a {
        Some(a) => a,
        None => {
            // (A one-device mesh lowers as a single-device program: no Shardy annotations,
            // as JAX's `{jax.result_info = "result", mhlo.memory_kind = "pinned_host"}`.)
            let mesh = (0..avals.len()).find_map(|i| target(i).and_then(|x| target_dims(x, avals[i].ndim())).map(|(m, _)| m)).filter(|m| m.size() > 1)?;
            Annotations {
                mesh,
                ins: jaxpr.jaxpr.invars.iter().map(|v| vec![vec![]; v.aval.ndim()]).collect(),
                outs: avals.iter().map(|a| vec![vec![]; a.ndim()]).collect(),
                bare_ins: true,
            }
        }
    };
    for (i, av) in avals.iter().enumerate() {
        if let Some((m, d)) = target(i).and_then(|x| target_dims(x, av.ndim())) {
            if m == a.mesh && i < a.outs.len() {
                a.outs[i] = d;
            }
        }
    }
    Some(a)
}

/// Annotations for a call of `jaxpr` on `leaves` (`None` for a leaf that is not a
/// concrete array), when some argument is sharded and the propagation succeeds.
/// A program with a `shard_map` is annotated on that `shard_map`'s mesh (also on unsharded
/// arguments, as JAX's lowering of a `shard_map` always is).
pub(crate) fn annotations(jaxpr: &crate::ir::ClosedJaxpr, leaves: &[Option<Arc<crate::runtime::DeviceArray>>]) -> Option<Annotations> {
    let mesh = leaves
        .iter()
        .flatten()
        .find_map(|d| d.sharded_info().map(|s| s.sharding.mesh.clone()))
        .or_else(|| first_shard_map_mesh(&jaxpr.jaxpr))?;
    let ins: Vec<Dims> = jaxpr
        .jaxpr
        .invars
        .iter()
        .zip(leaves)
        .map(|(v, l)| match l.as_ref().and_then(|d| d.sharded_info()) {
            Some(s) if s.sharding.mesh == mesh => dims_of(&s.sharding.spec, v.aval.ndim()),
            _ => vec![vec![]; v.aval.ndim()],
        })
        .collect();
    let outs = jaxpr_rule(&jaxpr.jaxpr, &mesh, &ins).ok()?;
    Some(Annotations { mesh, ins, outs, bare_ins: false })
}

/// The mesh of the first `shard_map` equation of `j` (top level), if any.
pub(crate) fn first_shard_map_mesh(j: &Jaxpr) -> Option<Mesh> {
    j.eqns.iter().find_map(|e| match &e.primitive {
        Primitive::ShardMap(sm) => Some(sm.mesh.clone()),
        _ => None,
    })
}

/// Shardy's attribute text for `dims` on mesh symbol `sym`: `#sdy.sharding<@mesh, [{"X"}, {}]>`.
fn sdy(sym: &str, dims: &Dims) -> String {
    format!("#sdy.sharding{}", crate::lower::manual::sdy_dims(sym, dims))
}

/// The symbol `text` declares `mesh` as (`sdy.mesh @mesh_0 = <["a"=4]>`), and whether it
/// must still be declared: a module's `shard_map`s declare their meshes themselves; an
/// argument mesh none of them uses gets the next free symbol.
fn mesh_symbol_in(text: &str, mesh: &Mesh) -> (String, bool) {
    let value = crate::lower::manual::sdy_mesh_value(mesh);
    let mut count = 0;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("  sdy.mesh @") else { continue };
        count += 1;
        if let Some((sym, v)) = rest.split_once(" = ") {
            if v == value {
                return (sym.to_string(), false);
            }
        }
    }
    (crate::lower::manual::mesh_symbol(count), true)
}

/// Adds `attr` to the attribute dictionary after the type that ends at `pos` in `line`
/// (creating ` {attr}` when there is none); returns the position after it.
fn add_attr(line: &mut String, pos: usize, attr: &str) -> usize {
    // After a memory kind (JAX's order: `mhlo.memory_kind = "pinned_host", sdy.sharding = ..`).
    const KIND: &str = " {mhlo.memory_kind = \"";
    if line[pos..].starts_with(KIND) {
        if let Some(q) = line[pos + KIND.len()..].find('"') {
            let at = pos + KIND.len() + q + 1;
            line.insert_str(at, &format!(", {attr}"));
            return at + attr.len() + 2;
        }
    }
    if line[pos..].starts_with(" {") {
        line.insert_str(pos + 2, &format!("{attr}, "));
        pos + 2 + attr.len() + 2
    } else {
        let s = format!(" {{{attr}}}");
        line.insert_str(pos, &s);
        pos + s.len()
    }
}

/// The end of the `tensor<…>` (or scalar) type starting at `start` in `line`.
fn type_end(line: &str, start: usize) -> usize {
    let rest = &line[start..];
    if rest.starts_with("tensor<") {
        let mut depth = 0;
        for (i, c) in rest.char_indices() {
            match c {
                '<' => depth += 1,
                '>' => {
                    depth -= 1;
                    if depth == 0 {
                        return start + i + 1;
                    }
                }
                _ => {}
            }
        }
    }
    start + rest.find([',', ')', ' ']).unwrap_or(rest.len())
}

/// The lowered module text with Shardy annotations as JAX prints them: the module's
/// `mhlo.num_partitions`, `sdy.mesh @mesh = <["X"=4, "Y"=2]>`, and a `sdy.sharding` on each
/// argument of `@main` (the last `ins.len()` ones: large constants come first) and result.
/// Display only: the module that compiles is the unannotated one.
pub(crate) fn annotate_text(text: &str, a: &Annotations) -> String {
    let mut out = String::with_capacity(text.len() + 256);
    let (sym, declare) = mesh_symbol_in(text, &a.mesh);
    let mut declared = !declare;
    for line in text.lines() {
        let mut line = line.to_string();
        if line.starts_with("module @") && line.ends_with(" {") {
            let n = a.mesh.size();
            if let Some(p) = line.find(" attributes {") {
                line.insert_str(p + " attributes {".len(), &format!("mhlo.num_partitions = {n} : i32, "));
            } else {
                line.truncate(line.len() - 2);
                line.push_str(&format!(" attributes {{mhlo.num_partitions = {n} : i32}} {{"));
            }
            out.push_str(&line);
            out.push('\n');
            // (A module with a `shard_map` declares its meshes itself: `lower/manual.rs`;
            // the argument mesh follows them when it is another one.)
            if !declared && !text.contains("  sdy.mesh @") {
                out.push_str(&format!("  {}\n", crate::lower::manual::sdy_mesh(&sym, &a.mesh)));
                declared = true;
            }
            continue;
        }
        if !declared && line.starts_with("  ") && !line.starts_with("  sdy.mesh @") {
            out.push_str(&format!("  {}\n", crate::lower::manual::sdy_mesh(&sym, &a.mesh)));
            declared = true;
        }
        if let Some(sig) = line.find("func.func public @main(") {
            let args_end = line[sig..].find(") -> ").map(|p| sig + p);
            let nargs = line[sig..args_end.unwrap_or(line.len())].matches("%arg").count();
            let first = nargs.saturating_sub(a.ins.len());
            let mut from = sig;
            for i in 0..nargs {
                let key = format!("%arg{i}: ");
                let Some(p) = line[from..].find(&key).map(|p| from + p + key.len()) else { break };
                let end = type_end(&line, p);
                from = if i >= first && !a.bare_ins { add_attr(&mut line, end, &format!("sdy.sharding = {}", sdy(&sym, &a.ins[i - first]))) } else { end };
            }
            if let Some(r) = line[from..].find(") -> (").map(|p| from + p + ") -> (".len()) {
                let mut pos = r;
                for d in &a.outs {
                    let end = type_end(&line, pos);
                    let after = add_attr(&mut line, end, &format!("sdy.sharding = {}", sdy(&sym, d)));
                    match line[after..].find(", ") {
                        Some(q) if !line[after..after + q].contains(')') => pos = after + q + 2,
                        _ => break,
                    }
                }
            }
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// `Compiled::as_text` for a call on sharded arguments: which execution path it takes.
/// Partitioned programs (`partition.rs`) show the per-device program with its collectives
/// and each compiled segment; the others a first line saying their inputs are gathered on
/// the mesh's first device, then `global_ir` (the whole program's optimized module).
pub(crate) fn compiled_text(jaxpr: &crate::ir::ClosedJaxpr, a: &Annotations, global_ir: &str, opts: &crate::transform::pipeline::StageOptions) -> String {
    match crate::partition::describe(jaxpr, &a.mesh, &a.ins, opts) {
        Some(s) => s,
        None => format!(
            "// jaxrepl: arguments sharded over {}; path: gathered (inputs assembled on device {}, the whole program runs there; results carry the propagated shardings).\n{global_ir}",
            a.mesh,
            a.mesh.device_ids().first().copied().unwrap_or(0)
        ),
    }
}
