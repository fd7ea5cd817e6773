//! Control flow and nested `jit` in the partitioner (`partition.rs`).
//!
//! **Control flow** (`scan`, `while`, `fori_loop`, `cond`) runs per device when its body is
//! **shard-local** under the layouts of its operands: every equation of the body, on
//! blocks, computes the blocks of its global result with no communication. The check
//! walks the body with the propagation's rules restricted to the local cases:
//! - elementwise equations whose non-0-d operands share one layout (0-d ones are whole);
//! - `dot_general` contracting unsplit dims (batch dims split alike), e.g. a block of rows
//!   times a replicated weight; contracting dims split alike on both operands give each
//!   device a partial product, all-reduced (`psum`) inside the body;
//! - reductions: over unsplit dims local; over split dims the local reduction then an
//!   all-reduce (`psum`/`pmax`/`pmin`) inside the body. Such an all-reduce is a host call
//!   the compiled loop makes on its device's thread (`collective_call`), meeting the other
//!   devices at the collectives' barrier each iteration; its result is whole;
//! - `broadcast_in_dim` (new dims whole, its shape param
//!   rewritten to the block), `transpose` and `reshape` keeping a split dim the major dim
//!   of its group;
//! - any equation whose operands are all whole (replicated: every device computes it).
//!
//! - nested `scan`/`while`/`cond` whose own bodies are shard-local under the operands'
//!   layouts, carries keeping theirs (`nested_local`);
//!
//! Anything else on split values (a contraction of dims split differently, a reshape
//! moving a split dim, a gather, ...) is not local. Layouts are
//! chosen by a small fixpoint: the operands' own layouts first; same-shaped whole operands
//! then take a split operand's layout (a local slice), and whole values a body broadcasts
//! from whole ones are broadcast straight to the block where a split value needs them; a carry whose body result comes
//! back laid out differently starts in that layout (its result is then resharded to the
//! propagated sharding, its initial value's, as JAX fixes a carry's type by its initial
//! value); a scan's `xs` split along the scanned
//! dim is all-gathered along it (its slices must be whole along it). 0-d values are then
//! computed from whole values only, so all devices agree on trip counts and branches.
//! When no layout is local the loop runs whole (operands all-gathered), and the plan's
//! notes say which path each loop took and why (`Compiled::as_text`, `%compile`).
//!
//! **Nested `jit`** (`pjit` equations without constants or effects) is inlined before
//! planning, also inside loop and branch bodies, so its equations are partitioned like the
//! caller's (no gather at the call; a loop calling a jitted function can run per device).

use super::{elementwise, replicated, Builder, Val};
use crate::error::Result;
use crate::ir::{Atom, Eqn, Jaxpr, Primitive, ShapedArray, Var};
use crate::sharding_rules::Dims;
use std::collections::HashMap;

fn is_whole(d: &Dims) -> bool {
    d.iter().all(|e| e.is_empty())
}

/// `j` retyped to run per device with its invars laid out as `ins`: the per-device jaxpr
/// (same var ids, block types, shape params rewritten) and its outvars' layouts.
/// `Err(why)`: not shard-local.
fn local_jaxpr(b: &Builder, j: &Jaxpr, ins: &[Dims]) -> std::result::Result<(Jaxpr, Vec<Dims>), String> {
    if !j.constvars.is_empty() {
        return Err("its body closes over constants".into());
    }
    let mut env: HashMap<u32, (Dims, Var)> = HashMap::new();
    let retype = |v: &Var, d: &Dims| -> std::result::Result<Var, String> {
        if b.fit(&v.aval, d) != *d {
            return Err(format!("a {} value cannot be split as {:?}", v.aval.short(), d));
        }
        let aval = b.block(&v.aval, d).ok_or_else(|| format!("a {} value does not divide into blocks", v.aval.short()))?;
        Ok(Var { id: v.id, aval })
    };
    let mut invars = vec![];
    for (v, d) in j.invars.iter().zip(ins) {
        let pv = retype(v, d)?;
        invars.push(pv.clone());
        env.insert(v.id, (d.clone(), pv));
    }
    let mut eqns = vec![];
    // Whole values made by `broadcast_in_dim` of a whole operand: (operand, dims).
    let mut broadcasts: HashMap<u32, (Atom, Vec<usize>)> = HashMap::new();
    let mut next_id = crate::lax::control::max_id(j) + 1;
    for e in &j.eqns {
        let mut in_dims: Vec<Dims> = vec![];
        let mut inputs = vec![];
        for a in &e.inputs {
            match a {
                Atom::Var(v) => {
                    let (d, pv) = env.get(&v.id).cloned().ok_or("a value defined outside its body")?;
                    in_dims.push(d);
                    inputs.push(Atom::Var(pv));
                }
                Atom::Lit(l) => {
                    in_dims.push(replicated(l.aval.ndim()));
                    inputs.push(a.clone());
                }
            }
        }
        let name = e.primitive.name();
        if super::bails(&e.primitive) {
            return Err(format!("`{name}` in its body"));
        }
        let all_whole = in_dims.iter().all(is_whole);
        let outs_g: Vec<&ShapedArray> = e.outputs.iter().map(|v| &v.aval).collect();
        use Primitive::*;
        // An all-reduce over these axes follows the equation (a contraction or reduction of a
        // split dim: each device's partial result, summed / maxed across the devices).
        let mut reduce: Option<crate::ir::Collective> = None;
        let (primitive, out_dims): (Primitive, Vec<Dims>) = match &e.primitive {
            p if all_whole => (p.clone(), outs_g.iter().map(|a| replicated(a.ndim())).collect()),
            Scan { .. } | While { .. } | Cond { .. } => nested_local(b, &e.primitive, &in_dims)?,
            p if !p.sub_jaxprs().is_empty() => return Err(format!("nested `{name}` on split values")),
            p if elementwise(p) && outs_g.len() == 1 && e.inputs.iter().all(|a| a.aval().ndim() == 0 || a.aval().shape == outs_g[0].shape) => {
                // The split layout of a non-0-d operand; whole operands made by a broadcast of
                // whole values in this body are broadcast again straight to their block.
                let layout = e.inputs.iter().zip(&in_dims).find(|(a, d)| a.aval().ndim() > 0 && !is_whole(d)).map(|(_, d)| d.clone());
                if let Some(l) = &layout {
                    for (k, (a, d)) in e.inputs.iter().zip(&in_dims).enumerate() {
                        if a.aval().ndim() == 0 || d == l {
                            continue;
                        }
                        let made = match a {
                            Atom::Var(v) if is_whole(d) => broadcasts.get(&v.id).cloned(),
                            _ => None,
                        };
                        let Some((x, bd)) = made.filter(|(x, bd)| l.iter().enumerate().all(|(k, axes)| axes.is_empty() || bd.iter().position(|&o| o == k).is_none_or(|i| x.aval().shape[i] == 1))) else {
                            return Err(format!("`{name}` combines values laid out differently"));
                        };
                        let blk = b.block(a.aval(), l).ok_or("a broadcast does not divide into blocks")?;
                        let nv = Var { id: next_id, aval: blk.clone() };
                        next_id += 1;
                        eqns.push(Eqn {
                            primitive: BroadcastInDim { shape: blk.shape.clone(), broadcast_dimensions: bd.clone() },
                            inputs: vec![x],
                            outputs: vec![nv.clone()],
                            ..e.clone()
                        });
                        inputs[k] = Atom::Var(nv);
                    }
                }
                (p.clone(), vec![layout.unwrap_or_else(|| replicated(outs_g[0].ndim()))])
            }
            DotGeneral { lhs_contracting, rhs_contracting, lhs_batch, rhs_batch, .. } if in_dims.len() == 2 => {
                let (l, r) = (&in_dims[0], &in_dims[1]);
                // Contracting dims split alike on both operands: a partial product per device,
                // all-reduced (`psum`) inside the body.
                let mut sum_axes: Vec<String> = vec![];
                for (&x, &y) in lhs_contracting.iter().zip(rhs_contracting) {
                    if l[x] != r[y] {
                        return Err("`dot_general` contracts dims split differently".into());
                    }
                    sum_axes.extend(l[x].iter().cloned());
                }
                if !sum_axes.is_empty() {
                    reduce = Some(crate::ir::Collective::Psum { axes: sum_axes });
                }
                let mut o: Dims = vec![];
                for (&x, &y) in lhs_batch.iter().zip(rhs_batch) {
                    if l[x] != r[y] {
                        return Err("`dot_general` batch dims split differently".into());
                    }
                    o.push(l[x].clone());
                }
                o.extend((0..l.len()).filter(|d| !lhs_contracting.contains(d) && !lhs_batch.contains(d)).map(|d| l[d].clone()));
                o.extend((0..r.len()).filter(|d| !rhs_contracting.contains(d) && !rhs_batch.contains(d)).map(|d| r[d].clone()));
                (e.primitive.clone(), vec![o])
            }
            ReduceSum { axes } | ReduceMax { axes } | ReduceMin { axes } if in_dims.len() == 1 => {
                // Over split dims: the local reduction, then an all-reduce inside the body.
                let split: Vec<String> = axes.iter().flat_map(|&k| in_dims[0][k].iter().cloned()).collect();
                if !split.is_empty() {
                    reduce = Some(match &e.primitive {
                        ReduceMax { .. } => crate::ir::Collective::Pmax { axes: split },
                        ReduceMin { .. } => crate::ir::Collective::Pmin { axes: split },
                        _ => crate::ir::Collective::Psum { axes: split },
                    });
                }
                (e.primitive.clone(), vec![in_dims[0].iter().enumerate().filter(|(k, _)| !axes.contains(k)).map(|(_, a)| a.clone()).collect()])
            }
            BroadcastInDim { shape, broadcast_dimensions } if in_dims.len() == 1 => {
                let ig = e.inputs[0].aval();
                let mut o = replicated(shape.len());
                for (i, &od) in broadcast_dimensions.iter().enumerate() {
                    if ig.shape[i] == shape[od] {
                        o[od] = in_dims[0][i].clone();
                    } else if !in_dims[0][i].is_empty() {
                        return Err("`broadcast_in_dim` expands a split dim".into());
                    }
                }
                let blk = b.block(outs_g[0], &o).ok_or("a broadcast result does not divide into blocks")?;
                (BroadcastInDim { shape: blk.shape, broadcast_dimensions: broadcast_dimensions.clone() }, vec![o])
            }
            Reshape { .. } if in_dims.len() == 1 => {
                // As the planner's reshape: a split dim staying the major dim of its group.
                let ig = e.inputs[0].aval();
                let kept = crate::sharding_rules::eqn_rule(&e.primitive, b.mesh, &[ig], std::slice::from_ref(&in_dims[0]), &[outs_g[0].clone()]).ok().and_then(|mut o| o.pop());
                let count = |x: &Dims| x.iter().map(|a| a.len()).sum::<usize>();
                match kept {
                    Some(o) if count(&o) == count(&in_dims[0]) => {
                        let blk = b.block(outs_g[0], &o).ok_or("a reshape result does not divide into blocks")?;
                        (Reshape { new_sizes: blk.shape }, vec![o])
                    }
                    _ => return Err("`reshape` moves a split dim".into()),
                }
            }
            Transpose { permutation } if in_dims.len() == 1 => (e.primitive.clone(), vec![permutation.iter().map(|&p| in_dims[0][p].clone()).collect()]),
            _ => return Err(format!("`{name}` on split values")),
        };
        if let (BroadcastInDim { broadcast_dimensions, .. }, true, [o]) = (&e.primitive, all_whole, e.outputs.as_slice()) {
            broadcasts.insert(o.id, (inputs[0].clone(), broadcast_dimensions.clone()));
        }
        let mut outputs = vec![];
        for (v, d) in e.outputs.iter().zip(&out_dims) {
            let pv = retype(v, d)?;
            outputs.push(pv.clone());
            env.insert(v.id, (d.clone(), pv));
        }
        match (reduce, outputs.as_slice()) {
            (Some(c), [out]) => {
                // The partial result into a fresh var, then the all-reduce into the output.
                let partial = Var { id: next_id, aval: out.aval.clone() };
                next_id += 1;
                eqns.push(Eqn { primitive, inputs, outputs: vec![partial.clone()], ..e.clone() });
                eqns.push(Eqn { primitive: collective_call(c, &out.aval), inputs: vec![Atom::Var(partial)], outputs: outputs.clone(), ..e.clone() });
            }
            (Some(_), _) => return Err(format!("`{name}` with several results over a split dim")),
            (None, _) => eqns.push(Eqn { primitive, inputs, outputs, ..e.clone() }),
        }
    }
    let mut outvars = vec![];
    let mut out_dims = vec![];
    for a in &j.outvars {
        match a {
            Atom::Var(v) => {
                let (d, pv) = env.get(&v.id).cloned().ok_or("an output defined outside its body")?;
                outvars.push(Atom::Var(pv));
                out_dims.push(d);
            }
            Atom::Lit(l) => {
                outvars.push(a.clone());
                out_dims.push(replicated(l.aval.ndim()));
            }
        }
    }
    Ok((Jaxpr { constvars: vec![], invars, eqns, outvars }, out_dims))
}

/// A collective inside a per-device loop body, as a host call the compiled loop makes on
/// its device's thread: `runtime::collectives::run` there meets the other devices at the
/// barrier (every device runs the same trip counts, so they meet in the same order). The
/// partitioner's own collectives cut the program into segments; inside a compiled loop
/// this call is the cut. Shows as `pure_callback[callback=<function psum> …]`.
fn collective_call(c: crate::ir::Collective, out: &ShapedArray) -> Primitive {
    let name = c.name().to_string();
    let aval = out.clone();
    let f: crate::transform::callbacks::HostFn = std::sync::Arc::new(move |args: &[crate::trace::Array]| {
        let x = args.first().and_then(|a| a.device().cloned()).ok_or_else(|| crate::error::Error::runtime("internal: collective without operand"))?;
        let r = crate::runtime::collectives::run(&c, Some(&x), &aval)?;
        Ok(vec![crate::trace::Array::from_device(r)])
    });
    let id = crate::transform::callbacks::register_internal(&name, vec![out.clone()], f);
    Primitive::PureCallback { callback: id, name, result_avals: vec![out.clone()], vmap_method: None }
}

/// The collectives `collective_call` put in `p`'s bodies (the partitioner's only host calls
/// there: a user's callback sends the program to the gather path).
fn count_collective_calls(p: &Primitive) -> usize {
    p.sub_jaxprs()
        .into_iter()
        .flat_map(|j| j.eqns.iter())
        .map(|e| usize::from(matches!(e.primitive, Primitive::PureCallback { .. })) + count_collective_calls(&e.primitive))
        .sum()
}

/// A `scan`, `while` or `cond` inside a body, on operands laid out as `ins`: its own bodies
/// retyped to blocks (`local_jaxpr`) when they are shard-local under those layouts with
/// their carries keeping their layout (no fixpoint inside: the outer loop's settles the
/// operands); the retyped primitive and its results' layouts. `Err(why)`: not local.
fn nested_local(b: &Builder, p: &Primitive, ins: &[Dims]) -> std::result::Result<(Primitive, Vec<Dims>), String> {
    use Primitive::*;
    let name = p.name();
    match p {
        Scan { jaxpr, length, reverse, unroll, num_consts, num_carry } => {
            let (nc, nk) = (*num_consts, *num_carry);
            let mut body_in = ins.to_vec();
            for d in body_in.iter_mut().skip(nc + nk) {
                if d.first().is_some_and(|e| !e.is_empty()) {
                    return Err(format!("nested `{name}` scans over a split dim"));
                }
                if !d.is_empty() {
                    d.remove(0);
                }
            }
            let (bj, outs) = local_jaxpr(b, jaxpr, &body_in)?;
            if outs[..nk] != body_in[nc..nc + nk] {
                return Err(format!("nested `{name}`'s carries come back laid out differently"));
            }
            let res: Vec<Dims> = outs.iter().enumerate().map(|(k, d)| if k < nk { d.clone() } else { std::iter::once(vec![]).chain(d.iter().cloned()).collect() }).collect();
            Ok((Scan { jaxpr: Box::new(bj), length: *length, reverse: *reverse, unroll: *unroll, num_consts: nc, num_carry: nk }, res))
        }
        While { cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts } => {
            let (cc, bc) = (*cond_nconsts, *body_nconsts);
            let carry = &ins[cc + bc..];
            let (bj, outs) = local_jaxpr(b, body_jaxpr, &ins[cc..])?;
            if outs != carry {
                return Err(format!("nested `{name}`'s carries come back laid out differently"));
            }
            let cins: Vec<Dims> = ins[..cc].iter().chain(carry).cloned().collect();
            let (cj, co) = local_jaxpr(b, cond_jaxpr, &cins)?;
            if co.iter().any(|d| !is_whole(d)) {
                return Err(format!("nested `{name}`'s condition is split"));
            }
            Ok((While { cond_jaxpr: Box::new(cj), body_jaxpr: Box::new(bj), cond_nconsts: cc, body_nconsts: bc }, outs))
        }
        Cond { branches } => {
            if ins.first().is_some_and(|d| !is_whole(d)) {
                return Err(format!("nested `{name}`'s index is split"));
            }
            let mut js = vec![];
            let mut first: Option<Vec<Dims>> = None;
            for j in branches {
                let (pj, o) = local_jaxpr(b, j, &ins[1..])?;
                match &first {
                    None => first = Some(o),
                    Some(f) if *f == o => {}
                    Some(_) => return Err(format!("nested `{name}`'s branches lay out their results differently")),
                }
                js.push(pj);
            }
            Ok((Cond { branches: js }, first.unwrap_or_default()))
        }
        _ => Err(format!("nested `{name}` on split values")),
    }
}

/// Same-shaped whole body inputs take the layout of a split one (`ins` by `avals`);
/// whether anything changed.
fn unify(avals: &[ShapedArray], ins: &mut [Dims]) -> bool {
    let mut changed = false;
    for i in 0..ins.len() {
        if avals[i].ndim() == 0 || !is_whole(&ins[i]) {
            continue;
        }
        if let Some(k) = (0..ins.len()).find(|&k| avals[k].shape == avals[i].shape && !is_whole(&ins[k])) {
            ins[i] = ins[k].clone();
            changed = true;
        }
    }
    changed
}

/// The body layouts of a loop: starting from `ins` (body invars `avals`), the carries at
/// positions `carry` (body invar index, body outvar index) settled to what the body gives
/// back; the per-device bodies (`check` retypes every sub-jaxpr for the layouts) and the
/// settled layouts. `Err(why)`: no shard-local layout found.
#[allow(clippy::type_complexity)]
fn settle(
    avals: &[ShapedArray],
    mut ins: Vec<Dims>,
    carry: &[(usize, usize)],
    check: &dyn Fn(&[Dims]) -> std::result::Result<(Vec<Jaxpr>, Vec<Dims>), String>,
) -> std::result::Result<(Vec<Jaxpr>, Vec<Dims>, Vec<Dims>), String> {
    let mut unified = false;
    let mut last = String::new();
    for _ in 0..6 {
        match check(&ins) {
            Ok((js, outs)) => {
                let mut moved = false;
                for &(i, o) in carry {
                    if outs[o] != ins[i] {
                        ins[i] = outs[o].clone();
                        moved = true;
                    }
                }
                if !moved {
                    return Ok((js, ins, outs));
                }
                last = "its carries come back laid out differently".into();
            }
            Err(why) => {
                last = why;
                if unified || !unify(avals, &mut ins) {
                    return Err(last);
                }
                unified = true;
            }
        }
    }
    Err(last)
}

/// A `scan`, `while` or `cond` equation run per device when its body is shard-local
/// (module doc): operands resharded to the chosen layouts, the loop emitted with its
/// bodies retyped to blocks. Returns its results' layouts; `Ok(None)`: it runs whole (the
/// reason is in the plan's notes).
pub(super) fn loop_per_device(b: &mut Builder, vals: &mut HashMap<u32, Val>, e: &Eqn) -> Result<Option<Vec<Dims>>> {
    use Primitive::*;
    if !matches!(e.primitive, Scan { .. } | While { .. } | Cond { .. }) {
        return Ok(None);
    }
    let mut cur = vec![];
    for a in &e.inputs {
        let d = b.settled_dims(a, vals)?;
        cur.push(if d.len() == a.aval().ndim() { b.fit(a.aval(), &d) } else { replicated(a.aval().ndim()) });
    }
    let where_ = e.source.as_ref().map(|s| format!(" at {s}")).unwrap_or_default();
    let name = e.primitive.name();
    if cur.iter().all(is_whole) {
        return Ok(None); // nothing split: it runs whole, replicated, as any equation
    }
    let mut gathered_xs = false;
    let bref: &Builder = b;
    // Body input avals/layouts, and how to go back to operand layouts.
    let r: std::result::Result<(Primitive, Vec<Dims>, Vec<Dims>), String> = match &e.primitive {
        Scan { jaxpr, length, reverse, unroll, num_consts, num_carry } => {
            let (nc, nk) = (*num_consts, *num_carry);
            let mut ins = cur.clone();
            for d in ins.iter_mut().skip(nc + nk) {
                if !d[0].is_empty() {
                    gathered_xs = true;
                }
                d.remove(0);
            }
            let avals: Vec<ShapedArray> = jaxpr.invars.iter().map(|v| v.aval.clone()).collect();
            let carry: Vec<(usize, usize)> = (0..nk).map(|k| (nc + k, k)).collect();
            let check = |ins: &[Dims]| local_jaxpr(bref, jaxpr, ins).map(|(j, o)| (vec![j], o));
            settle(&avals, ins, &carry, &check).map(|(mut js, ins, outs)| {
                let ops: Vec<Dims> = ins.iter().enumerate().map(|(i, d)| if i < nc + nk { d.clone() } else { std::iter::once(vec![]).chain(d.iter().cloned()).collect() }).collect();
                let res: Vec<Dims> = outs.iter().enumerate().map(|(k, d)| if k < nk { d.clone() } else { std::iter::once(vec![]).chain(d.iter().cloned()).collect() }).collect();
                let p = Scan { jaxpr: Box::new(js.remove(0)), length: *length, reverse: *reverse, unroll: *unroll, num_consts: nc, num_carry: nk };
                (p, ops, res)
            })
        }
        While { cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts } => {
            let (cc, bc) = (*cond_nconsts, *body_nconsts);
            let n = e.inputs.len() - cc - bc;
            // Body inputs: body consts, carries; then the cond on cond consts + carries.
            let ins: Vec<Dims> = cur[cc..].to_vec();
            let avals: Vec<ShapedArray> = body_jaxpr.invars.iter().map(|v| v.aval.clone()).collect();
            let carry: Vec<(usize, usize)> = (0..n).map(|k| (bc + k, k)).collect();
            let cond_consts = cur[..cc].to_vec();
            let check = |ins: &[Dims]| {
                let (bj, outs) = local_jaxpr(bref, body_jaxpr, ins)?;
                let mut cins = cond_consts.clone();
                cins.extend(ins[bc..].iter().cloned());
                let (cj, co) = local_jaxpr(bref, cond_jaxpr, &cins)?;
                if co.iter().any(|d| !is_whole(d)) {
                    return Err("its condition is split".into());
                }
                Ok((vec![cj, bj], outs))
            };
            settle(&avals, ins, &carry, &check).map(|(mut js, ins, outs)| {
                let mut ops = cond_consts.clone();
                ops.extend(ins);
                let (cj, bj) = (js.remove(0), js.remove(0));
                (While { cond_jaxpr: Box::new(cj), body_jaxpr: Box::new(bj), cond_nconsts: cc, body_nconsts: bc }, ops, outs)
            })
        }
        Cond { branches } => {
            let ins: Vec<Dims> = cur[1..].to_vec();
            let avals: Vec<ShapedArray> = branches.first().map(|j| j.invars.iter().map(|v| v.aval.clone()).collect()).unwrap_or_default();
            let check = |ins: &[Dims]| {
                let mut js = vec![];
                let mut first: Option<Vec<Dims>> = None;
                for j in branches {
                    let (pj, o) = local_jaxpr(bref, j, ins)?;
                    match &first {
                        None => first = Some(o),
                        Some(f) if *f == o => {}
                        Some(_) => return Err("its branches lay out their results differently".into()),
                    }
                    js.push(pj);
                }
                Ok((js, first.unwrap_or_default()))
            };
            settle(&avals, ins, &[], &check).map(|(js, ins, outs)| {
                let mut ops = vec![replicated(0)];
                ops.extend(ins);
                (Cond { branches: js }, ops, outs)
            })
        }
        _ => return Ok(None),
    };
    let (p, ops, res) = match r {
        Ok(x) => x,
        Err(why) => {
            b.notes.push(format!("{name}{where_}: runs whole (operands all-gathered): {why}"));
            return Ok(None);
        }
    };
    let mut ins = Vec::with_capacity(e.inputs.len());
    for (a, d) in e.inputs.iter().zip(&ops) {
        ins.push(b.operand(a, vals, d)?);
    }
    let mut out_avals = vec![];
    for (v, d) in e.outputs.iter().zip(&res) {
        match b.block(&v.aval, d) {
            Some(a) => out_avals.push(a),
            None => {
                b.notes.push(format!("{name}{where_}: runs whole (operands all-gathered): a result does not divide into blocks"));
                return Ok(None);
            }
        }
    }
    let reduces = count_collective_calls(&p);
    let outs = b.emit(p, ins, out_avals, Some(e));
    for ((g, v), d) in e.outputs.iter().zip(outs).zip(&res) {
        vals.insert(g.id, Val { var: v, dims: d.clone(), partial: None });
    }
    let xs = if gathered_xs { "; xs split along the scanned dim were all-gathered along it first" } else { "" };
    let ar = match reduces {
        0 => String::new(),
        1 => "; 1 all-reduce inside its body, per iteration".to_string(),
        n => format!("; {n} all-reduces inside its body, per iteration"),
    };
    b.notes.push(format!("{name}{where_}: runs per device (its body is shard-local on blocks){ar}{xs}"));
    Ok(Some(res))
}

/// Whether `j` (or a control-flow body in it) holds a `pjit` equation `inline_pjits` inlines.
fn has_inlinable_pjit(j: &Jaxpr) -> bool {
    j.eqns.iter().any(|e| match &e.primitive {
        Primitive::Pjit { jaxpr, .. } => jaxpr.consts.is_empty() && !jaxpr.jaxpr.has_effects(),
        p @ (Primitive::Scan { .. } | Primitive::While { .. } | Primitive::Cond { .. }) => p.sub_jaxprs().into_iter().any(has_inlinable_pjit),
        _ => false,
    })
}

/// A control-flow primitive with the nested `jit`s of its bodies inlined (each body in its
/// own id space), so loops calling jitted functions can run per device; others unchanged.
fn inline_in_bodies(p: &Primitive) -> Primitive {
    use Primitive::*;
    match p {
        Scan { jaxpr, length, reverse, unroll, num_consts, num_carry } if has_inlinable_pjit(jaxpr) => {
            Scan { jaxpr: Box::new(inline_pjits(jaxpr)), length: *length, reverse: *reverse, unroll: *unroll, num_consts: *num_consts, num_carry: *num_carry }
        }
        While { cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts } if has_inlinable_pjit(cond_jaxpr) || has_inlinable_pjit(body_jaxpr) => While {
            cond_jaxpr: Box::new(inline_pjits(cond_jaxpr)),
            body_jaxpr: Box::new(inline_pjits(body_jaxpr)),
            cond_nconsts: *cond_nconsts,
            body_nconsts: *body_nconsts,
        },
        Cond { branches } if branches.iter().any(has_inlinable_pjit) => Cond { branches: branches.iter().map(inline_pjits).collect() },
        p => p.clone(),
    }
}

/// `j` with every nested `jit` (a `pjit` equation without constants or effects) inlined,
/// also inside control-flow bodies: its equations with fresh ids, its results substituted
/// where they are used.
pub(super) fn inline_pjits(j: &Jaxpr) -> Jaxpr {
    if !has_inlinable_pjit(j) {
        return j.clone();
    }
    let mut next = crate::lax::control::max_id(j) + 1;
    let mut subst: HashMap<u32, Atom> = HashMap::new();
    let sub = |subst: &HashMap<u32, Atom>, a: &Atom| match a {
        Atom::Var(v) => subst.get(&v.id).cloned().unwrap_or_else(|| a.clone()),
        Atom::Lit(_) => a.clone(),
    };
    let mut eqns = vec![];
    for e in &j.eqns {
        let inputs: Vec<Atom> = e.inputs.iter().map(|a| sub(&subst, a)).collect();
        match &e.primitive {
            Primitive::Pjit { jaxpr, .. } if jaxpr.consts.is_empty() && !jaxpr.jaxpr.has_effects() && jaxpr.jaxpr.invars.len() == inputs.len() => {
                let inner = inline_pjits(&jaxpr.jaxpr);
                let mut m: HashMap<u32, Atom> = HashMap::new();
                for (v, a) in inner.invars.iter().zip(&inputs) {
                    m.insert(v.id, a.clone());
                }
                for ie in &inner.eqns {
                    let ins: Vec<Atom> = ie.inputs.iter().map(|a| sub(&m, a)).collect();
                    let outs: Vec<Var> = ie
                        .outputs
                        .iter()
                        .map(|v| {
                            let nv = Var { id: next, aval: v.aval.clone() };
                            next += 1;
                            m.insert(v.id, Atom::Var(nv.clone()));
                            nv
                        })
                        .collect();
                    eqns.push(Eqn { inputs: ins, outputs: outs, ..ie.clone() });
                }
                for (o, a) in e.outputs.iter().zip(&inner.outvars) {
                    subst.insert(o.id, sub(&m, a));
                }
            }
            p => eqns.push(Eqn { inputs, primitive: inline_in_bodies(p), ..e.clone() }),
        }
    }
    let outvars = j.outvars.iter().map(|a| sub(&subst, a)).collect();
    Jaxpr { constvars: j.constvars.clone(), invars: j.invars.clone(), eqns, outvars }
}
