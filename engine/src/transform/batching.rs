//! `vmap` as a jaxpr interpreter: every value carries whether it is batched; batched
//! values keep their batch dimension first, and each primitive's batching rule rewrites
//! it into the same primitive on arrays with the extra leading dimension. Reference:
//! JAX's batching rules in `jax/_src/lax/lax.py` and autodidax's `vmap`.

use super::interp::{literal_array, trace_to_jaxpr, Env};
use super::jit::TraceOutput;
use crate::error::{Error, Result};
use crate::ir::{Atom, Jaxpr, Primitive, ShapedArray};
use crate::lax;
use crate::trace::pytree::{flatten_value, unflatten_like, ArgLeaf, Flat, Pytree};
use crate::trace::{bind, Array, Operand};
use std::panic::Location;

/// A value in the batching interpreter: the array and whether its dim 0 is the batch.
#[derive(Clone)]
pub(super) struct BVal {
    pub(super) x: Array,
    pub(super) batched: bool,
}

fn arr(a: &Array) -> Operand {
    Operand::Array(a.clone())
}

/// Moves axis `from` of `x` to position `to`.
pub fn move_axis(x: &Array, from: usize, to: usize) -> Result<Array> {
    if from == to {
        return Ok(x.clone());
    }
    let mut perm: Vec<usize> = (0..x.ndim()).filter(|&i| i != from).collect();
    perm.insert(to, from);
    lax::transpose(x, &perm)
}

/// `x` batched to `[b, *shape]`: unbatched values are broadcast, batched 0-d values
/// (implicit scalars of an elementwise op) are broadcast along the new dims.
pub(super) fn to_full(v: &BVal, b: usize, shape: &[usize]) -> Result<Array> {
    let mut full = vec![b];
    full.extend(shape);
    let s = v.x.shape();
    if s == full {
        return Ok(v.x.clone());
    }
    let dims: Vec<usize> = if v.batched {
        // [b, *t] with t a suffix of shape (t = [] for an implicit scalar).
        let t = s.len() - 1;
        std::iter::once(0).chain((shape.len() - t + 1)..=shape.len()).collect()
    } else {
        (full.len() - s.len()..full.len()).collect()
    };
    lax::bind1(Primitive::BroadcastInDim { shape: full, broadcast_dimensions: dims }, vec![arr(&v.x)])
}

fn shift(v: &[usize]) -> Vec<usize> {
    v.iter().map(|d| d + 1).collect()
}

/// The spec entry of the batch dim (0) of a batched `sharding_constraint` operand `x`
/// constrained to `target`: the `Explicit` axes `x`'s batch dim is split over (JAX's
/// `explicit_mesh_axis` of a vmap over an explicitly sharded argument: `reshard` and
/// `auto_axes` under `vmap` keep `float32[8@X,…]`), less any axis `target` uses or lacks;
/// empty (unsharded) otherwise.
fn batch_dim_entry(x: &Array, target: &crate::sharding::NamedSharding) -> crate::sharding::PEntry {
    let mut axes = Vec::new();
    if let Some(crate::sharding_types::ValueType { sharding: Some(s), .. }) = crate::sharding::value_type(x)
        && let Some(first) = s.spec.0.first()
    {
        let used = |a: &String| target.spec.0.iter().any(|e| e.0.contains(a));
        axes = first
            .0
            .iter()
            .filter(|a| s.mesh.axis_type(a) == Some(crate::sharding::AxisType::Explicit))
            .filter(|a| target.mesh.axis_names().contains(a) && !used(a))
            .cloned()
            .collect();
    }
    crate::sharding::PEntry(axes)
}

/// The batched result of one equation.
fn batch_eqn(p: &Primitive, ins: &[BVal], out: &ShapedArray, b: usize, loc: &'static Location<'static>) -> Result<Vec<BVal>> {
    use Primitive::*;
    let one = |x: Array| Ok(vec![BVal { x, batched: true }]);
    match p {
        // JAX's batching rule (`batching.get_sharding_for_vmap`): the batch dim (0) is
        // inserted into the constraint's spec split as the operand's batch dim is over
        // `Explicit` axes, else unsharded (no `spmd_axis_name`); an unbatched operand
        // keeps the constraint.
        ShardingConstraint { sharding } => {
            let mut sharding = sharding.clone();
            if ins[0].batched {
                let entry = batch_dim_entry(&ins[0].x, &sharding);
                if !sharding.spec.0.is_empty() || !entry.0.is_empty() {
                    sharding.spec.0.insert(0, entry);
                }
            }
            Ok(vec![BVal { x: lax::bind1(ShardingConstraint { sharding }, vec![arr(&ins[0].x)])?, batched: ins[0].batched }])
        }
        _ if p.is_unary_elementwise() || matches!(p, ConvertElementType { .. } | BitcastConvertType { .. } | StopGradient | DevicePut { .. }) => {
            one(bind(p.clone(), vec![arr(&ins[0].x)], loc)?.remove(0))
        }
        _ if p.is_binary_elementwise() || matches!(p, SelectN) => {
            let ops = ins.iter().map(|v| to_full(v, b, &out.shape).map(Operand::Array)).collect::<Result<Vec<_>>>()?;
            one(bind(p.clone(), ops, loc)?.remove(0))
        }
        BroadcastInDim { shape, broadcast_dimensions } => {
            let mut s = vec![b];
            s.extend(shape);
            let mut d = vec![0];
            d.extend(shift(broadcast_dimensions));
            one(lax::bind1(BroadcastInDim { shape: s, broadcast_dimensions: d }, vec![arr(&ins[0].x)])?)
        }
        Reshape { new_sizes } => {
            let mut s = vec![b];
            s.extend(new_sizes);
            one(lax::reshape(&ins[0].x, &s)?)
        }
        Transpose { permutation } => {
            let mut perm = vec![0];
            perm.extend(shift(permutation));
            one(lax::transpose(&ins[0].x, &perm)?)
        }
        ReduceSum { axes } => one(lax::bind1(ReduceSum { axes: shift(axes) }, vec![arr(&ins[0].x)])?),
        ReduceMax { axes } => one(lax::bind1(ReduceMax { axes: shift(axes) }, vec![arr(&ins[0].x)])?),
        ReduceMin { axes } => one(lax::bind1(ReduceMin { axes: shift(axes) }, vec![arr(&ins[0].x)])?),
        DotGeneral { lhs_contracting, rhs_contracting, lhs_batch, rhs_batch, precision, preferred_element_type, .. } => {
            let (l, r) = (&ins[0], &ins[1]);
            let pet = *preferred_element_type;
            match (l.batched, r.batched) {
                (true, true) => {
                    let mut lb = vec![0];
                    lb.extend(shift(lhs_batch));
                    let mut rb = vec![0];
                    rb.extend(shift(rhs_batch));
                    let p = DotGeneral {
                        lhs_contracting: shift(lhs_contracting),
                        rhs_contracting: shift(rhs_contracting),
                        lhs_batch: lb,
                        rhs_batch: rb,
                        precision: *precision,
                        preferred_element_type: pet,
                        // (The batch dim moves the result's dims: the sharding is the propagated one.)
                        out_sharding: None,
                    };
                    one(lax::bind1(p, vec![arr(&l.x), arr(&r.x)])?)
                }
                (true, false) => {
                    let p = DotGeneral {
                        lhs_contracting: shift(lhs_contracting),
                        rhs_contracting: rhs_contracting.clone(),
                        lhs_batch: shift(lhs_batch),
                        rhs_batch: rhs_batch.clone(),
                        precision: *precision,
                        preferred_element_type: pet,
                        // (The batch dim moves the result's dims: the sharding is the propagated one.)
                        out_sharding: None,
                    };
                    let y = lax::bind1(p, vec![arr(&l.x), arr(&r.x)])?;
                    one(move_axis(&y, lhs_batch.len(), 0)?)
                }
                (false, true) => {
                    let p = DotGeneral {
                        lhs_contracting: lhs_contracting.clone(),
                        rhs_contracting: shift(rhs_contracting),
                        lhs_batch: lhs_batch.clone(),
                        rhs_batch: shift(rhs_batch),
                        precision: *precision,
                        preferred_element_type: pet,
                        // (The batch dim moves the result's dims: the sharding is the propagated one.)
                        out_sharding: None,
                    };
                    let y = lax::bind1(p, vec![arr(&l.x), arr(&r.x)])?;
                    let lhs_free = l.x.ndim() - lhs_contracting.len() - lhs_batch.len();
                    one(move_axis(&y, lhs_batch.len() + lhs_free, 0)?)
                }
                (false, false) => unreachable!("handled by the caller"),
            }
        }
        DebugCallback { callback, fmt } => {
            // One call per batch element (JAX prints each element's line).
            let id = crate::debug::batched_callback(*callback, ins.iter().map(|v| v.batched).collect(), b);
            bind(DebugCallback { callback: id, fmt: fmt.clone() }, ins.iter().map(|v| arr(&v.x)).collect(), loc)?;
            Ok(vec![])
        }
        PureCallback { .. } | IoCallback { .. } => {
            let (xs, flags): (Vec<Array>, Vec<bool>) = ins.iter().map(|v| (v.x.clone(), v.batched)).unzip();
            Ok(super::callbacks::batch(p, &xs, &flags, b, loc)?.into_iter().map(|(x, batched)| BVal { x, batched }).collect())
        }
        p if p.call_body().is_some() => batch_call(p, ins, b),
        Cond { branches } => batch_cond(branches, ins, b),
        While { cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts } => {
            batch_while(cond_jaxpr, body_jaxpr, *cond_nconsts, *body_nconsts, ins, b)
        }
        Scan { jaxpr, length, reverse, unroll, num_consts, num_carry } => {
            batch_scan(jaxpr, *length, *reverse, *unroll, *num_consts, *num_carry, ins, b)
        }
        _ => super::batching_ops::batch(p, ins, out, b),
    }
}

/// Call-like primitives stay what they are under vmap (JAX's batching of
/// `custom_jvp_call`/`custom_vjp_call`/`checkpoint`): the body is batched into a new body
/// jaxpr, and a custom rule is replaced by the same rule mapped over the batch dimension
/// (`custom::batched_rule`), so `grad(vmap(f))` still uses the user's rule. Every
/// argument after the constants is given the batch dimension, so the batched rule sees
/// batch-first values only; constants keep their flags. Outputs are all batched.
fn batch_call(p: &Primitive, ins: &[BVal], b: usize) -> Result<Vec<BVal>> {
    use Primitive::*;
    let body = p.call_body().expect("a call-like primitive");
    let nconsts = match p {
        CustomJvpCall { num_consts, .. } | CustomVjpCall { num_consts, .. } => *num_consts,
        _ => 0,
    };
    let vals: Vec<BVal> = ins
        .iter()
        .enumerate()
        .map(|(i, v)| if i < nconsts { Ok(v.clone()) } else { Ok(BVal { x: to_full(v, b, &logical_shape(v))?, batched: true }) })
        .collect::<Result<_>>()?;
    let avals: Vec<ShapedArray> = vals.iter().map(traced_aval).collect();
    let flags: Vec<bool> = vals.iter().map(|v| v.batched).collect();
    let j = trace_to_jaxpr("vmap call", &avals, |ts| all_batched(batch_jaxpr(body, &[], bvals(&ts, &flags), b)?, b))?;
    // Constants captured while batching the body become further leading operands.
    let extra = j.consts.len();
    let new_body = Box::new(crate::lax::control::close(&j.jaxpr));
    let mut ops: Vec<Operand> = j.consts.iter().cloned().map(Operand::Array).collect();
    ops.extend(vals.iter().map(|v| arr(&v.x)));
    let np = match p {
        CustomJvpCall { name, rule, num_consts, .. } => CustomJvpCall {
            name: name.clone(),
            call_jaxpr: new_body,
            rule: super::custom::batched_rule(*rule)?,
            num_consts: extra + num_consts,
        },
        CustomVjpCall { name, rule, num_consts, .. } => CustomVjpCall {
            name: name.clone(),
            call_jaxpr: new_body,
            rule: super::custom::batched_rule(*rule)?,
            num_consts: extra + num_consts,
        },
        Checkpoint { policy, .. } => Checkpoint { jaxpr: new_body, policy: *policy },
        _ => unreachable!("call_body is only set for call-like primitives"),
    };
    let outs = bind(np, ops, Location::caller())?;
    Ok(outs.into_iter().map(|x| BVal { x, batched: true }).collect())
}

/// The unbatched shape of a value.
fn logical_shape(v: &BVal) -> Vec<usize> {
    let s = v.x.shape();
    if v.batched { s[1..].to_vec() } else { s }
}

/// Makes every value batched (broadcasting unbatched ones).
fn all_batched(vals: Vec<BVal>, b: usize) -> Result<Vec<Array>> {
    vals.iter().map(|v| to_full(v, b, &logical_shape(v))).collect()
}

/// The aval a traced sub-jaxpr sees for a value: with the batch dim when batched.
fn traced_aval(v: &BVal) -> ShapedArray {
    v.x.aval().strong()
}

fn bvals(xs: &[Array], flags: &[bool]) -> Vec<BVal> {
    xs.iter().zip(flags).map(|(x, &batched)| BVal { x: x.clone(), batched }).collect()
}

/// `cond` under vmap: a batched index becomes a `select_n` over every branch's
/// (batched) result, as in JAX; an unbatched index keeps the `cond` over batched branches.
fn batch_cond(branches: &[Jaxpr], ins: &[BVal], b: usize) -> Result<Vec<BVal>> {
    let ops_v = &ins[1..];
    if ins[0].batched {
        let mut per_branch = vec![];
        for bj in branches {
            per_branch.push(all_batched(batch_jaxpr(bj, &[], ops_v.to_vec(), b)?, b)?);
        }
        let n_out = per_branch[0].len();
        let mut outs = vec![];
        for k in 0..n_out {
            let cases: Vec<Array> = per_branch.iter().map(|o| o[k].clone()).collect();
            let shape = cases[0].shape()[1..].to_vec();
            let which = to_full(&ins[0], b, &shape)?;
            outs.push(BVal { x: lax::select_n(&which, &cases)?, batched: true });
        }
        return Ok(outs);
    }
    let flags: Vec<bool> = ops_v.iter().map(|v| v.batched).collect();
    let avals: Vec<ShapedArray> = ops_v.iter().map(traced_aval).collect();
    let traced = branches
        .iter()
        .map(|bj| trace_to_jaxpr("vmap cond", &avals, |v| all_batched(batch_jaxpr(bj, &[], bvals(&v, &flags), b)?, b)))
        .collect::<Result<Vec<_>>>()?;
    let (jaxprs, consts) = crate::lax::control::merge_branches(traced);
    let mut operands = vec![arr(&ins[0].x)];
    operands.extend(consts.iter().map(arr));
    operands.extend(ops_v.iter().map(|v| arr(&v.x)));
    let outs = bind(Primitive::Cond { branches: jaxprs }, operands, Location::caller())?;
    Ok(outs.into_iter().map(|x| BVal { x, batched: true }).collect())
}

/// `while_loop` under vmap: every carry is batched; a batched predicate runs while any
/// lane is still looping and freezes finished lanes with `select_n`, as JAX does.
fn batch_while(cj: &Jaxpr, bj: &Jaxpr, cn: usize, bn: usize, ins: &[BVal], b: usize) -> Result<Vec<BVal>> {
    let cconsts = &ins[..cn];
    let bconsts = &ins[cn..cn + bn];
    let init = all_batched(ins[cn + bn..].to_vec(), b)?;
    let nc = init.len();
    let cflags: Vec<bool> = cconsts.iter().map(|v| v.batched).collect();
    let bflags: Vec<bool> = bconsts.iter().map(|v| v.batched).collect();
    let carry_avals: Vec<ShapedArray> = init.iter().map(|x| x.aval().strong()).collect();
    // Is the predicate batched? Trace the batched cond once to find out.
    let mut ca: Vec<ShapedArray> = cconsts.iter().map(traced_aval).collect();
    ca.extend(carry_avals.clone());
    let mut pred_batched = false;
    let probe = trace_to_jaxpr("vmap while cond", &ca, |v| {
        let mut vals = bvals(&v[..cn], &cflags);
        vals.extend(bvals(&v[cn..], &vec![true; nc]));
        let p = batch_jaxpr(cj, &[], vals, b)?.remove(0);
        pred_batched = p.batched;
        Ok(vec![p.x])
    })?;
    if !pred_batched {
        let mut ba: Vec<ShapedArray> = bconsts.iter().map(traced_aval).collect();
        ba.extend(carry_avals.clone());
        let body = trace_to_jaxpr("vmap while body", &ba, |v| {
            let mut vals = bvals(&v[..bn], &bflags);
            vals.extend(bvals(&v[bn..], &vec![true; nc]));
            all_batched(batch_jaxpr(bj, &[], vals, b)?, b)
        })?;
        let mut operands: Vec<Operand> = probe.consts.iter().map(arr).collect();
        operands.extend(cconsts.iter().map(|v| arr(&v.x)));
        operands.extend(body.consts.iter().map(arr));
        operands.extend(bconsts.iter().map(|v| arr(&v.x)));
        operands.extend(init.iter().map(arr));
        let p = Primitive::While {
            cond_nconsts: probe.consts.len() + cn,
            body_nconsts: body.consts.len() + bn,
            cond_jaxpr: Box::new(crate::lax::control::close(&probe.jaxpr)),
            body_jaxpr: Box::new(crate::lax::control::close(&body.jaxpr)),
        };
        let outs = bind(p, operands, Location::caller())?;
        return Ok(outs.into_iter().map(|x| BVal { x, batched: true }).collect());
    }
    // Batched predicate: loop while any lane's predicate holds.
    let any_cond = trace_to_jaxpr("vmap while any", &ca, |v| {
        let mut vals = bvals(&v[..cn], &cflags);
        vals.extend(bvals(&v[cn..], &vec![true; nc]));
        let p = batch_jaxpr(cj, &[], vals, b)?.remove(0).x;
        let as_int = lax::convert_element_type(&p, crate::ir::DType::I32)?;
        let m = lax::bind1(Primitive::ReduceMax { axes: vec![0] }, vec![arr(&as_int)])?;
        Ok(vec![lax::binary(Primitive::Gt, arr(&m), lax::literal(crate::ir::Scalar::I32(0)))?])
    })?;
    let mut ba: Vec<ShapedArray> = cconsts.iter().map(traced_aval).collect();
    ba.extend(bconsts.iter().map(traced_aval));
    ba.extend(carry_avals.clone());
    let body = trace_to_jaxpr("vmap while masked body", &ba, |v| {
        let mut cvals = bvals(&v[..cn], &cflags);
        cvals.extend(bvals(&v[cn + bn..], &vec![true; nc]));
        let p = batch_jaxpr(cj, &[], cvals, b)?.remove(0).x;
        let mut bvals_v = bvals(&v[cn..cn + bn], &bflags);
        bvals_v.extend(bvals(&v[cn + bn..], &vec![true; nc]));
        let new = all_batched(batch_jaxpr(bj, &[], bvals_v, b)?, b)?;
        new.iter()
            .zip(&v[cn + bn..])
            .map(|(n, old)| {
                let which = to_full(&BVal { x: p.clone(), batched: true }, b, &n.shape()[1..])?;
                lax::select_n(&which, &[old.clone(), n.clone()])
            })
            .collect()
    })?;
    let mut operands: Vec<Operand> = any_cond.consts.iter().map(arr).collect();
    operands.extend(cconsts.iter().map(|v| arr(&v.x)));
    operands.extend(body.consts.iter().map(arr));
    operands.extend(cconsts.iter().map(|v| arr(&v.x)));
    operands.extend(bconsts.iter().map(|v| arr(&v.x)));
    operands.extend(init.iter().map(arr));
    let p = Primitive::While {
        cond_nconsts: any_cond.consts.len() + cn,
        body_nconsts: body.consts.len() + cn + bn,
        cond_jaxpr: Box::new(crate::lax::control::close(&any_cond.jaxpr)),
        body_jaxpr: Box::new(crate::lax::control::close(&body.jaxpr)),
    };
    let outs = bind(p, operands, Location::caller())?;
    Ok(outs.into_iter().map(|x| BVal { x, batched: true }).collect())
}

/// `scan` under vmap: batched `xs` are scanned over their axis 1 (the batch axis moves
/// behind the scanned one), carries are all batched, and `ys` come back batch-first.
#[allow(clippy::too_many_arguments)]
fn batch_scan(j: &Jaxpr, length: usize, reverse: bool, unroll: usize, nc: usize, ncar: usize, ins: &[BVal], b: usize) -> Result<Vec<BVal>> {
    let consts = &ins[..nc];
    let init = all_batched(ins[nc..nc + ncar].to_vec(), b)?;
    let xs = &ins[nc + ncar..];
    let kflags: Vec<bool> = consts.iter().map(|v| v.batched).collect();
    let xflags: Vec<bool> = xs.iter().map(|v| v.batched).collect();
    let xs_scan: Vec<Array> = xs.iter().map(|v| if v.batched { move_axis(&v.x, 0, 1) } else { Ok(v.x.clone()) }).collect::<Result<_>>()?;
    let mut avals: Vec<ShapedArray> = consts.iter().map(traced_aval).collect();
    avals.extend(init.iter().map(|x| x.aval().strong()));
    avals.extend(xs_scan.iter().map(|x| {
        let mut a = x.aval().strong();
        a.shape.remove(0);
        a
    }));
    let body = trace_to_jaxpr("vmap scan body", &avals, |v| {
        let mut vals = bvals(&v[..nc], &kflags);
        vals.extend(bvals(&v[nc..nc + ncar], &vec![true; ncar]));
        vals.extend(bvals(&v[nc + ncar..], &xflags));
        all_batched(batch_jaxpr(j, &[], vals, b)?, b)
    })?;
    let mut operands: Vec<Operand> = body.consts.iter().map(arr).collect();
    operands.extend(consts.iter().map(|v| arr(&v.x)));
    operands.extend(init.iter().map(arr));
    operands.extend(xs_scan.iter().map(arr));
    let p = Primitive::Scan {
        jaxpr: Box::new(crate::lax::control::close(&body.jaxpr)),
        length,
        reverse,
        unroll,
        num_consts: body.consts.len() + nc,
        num_carry: ncar,
    };
    let outs = bind(p, operands, Location::caller())?;
    outs.into_iter()
        .enumerate()
        .map(|(i, x)| Ok(BVal { x: if i < ncar { x } else { move_axis(&x, 1, 0)? }, batched: true }))
        .collect()
}

/// Evaluates `j` with batched inputs (batch dim first) of batch size `b`.
fn batch_jaxpr(j: &Jaxpr, consts: &[Array], args: Vec<BVal>, b: usize) -> Result<Vec<BVal>> {
    let loc = Location::caller();
    let mut env: Env<BVal> = Env::new();
    for (v, c) in j.constvars.iter().zip(consts) {
        env.set(v, BVal { x: c.clone(), batched: false });
    }
    for (v, a) in j.invars.iter().zip(args) {
        env.set(v, a);
    }
    let get = |env: &Env<BVal>, a: &Atom| -> Result<BVal> {
        match a {
            Atom::Var(v) => env.get(v),
            Atom::Lit(l) => Ok(BVal { x: literal_array(l.value, &l.aval)?, batched: false }),
        }
    };
    for e in &j.eqns {
        // An error of the equation names the user's line it was traced at, not this file.
        let outs = batch_one(e, &env, &get, b, loc).map_err(|err| err.at(e.source.clone()))?;
        for (v, o) in e.outputs.iter().zip(outs) {
            env.set(v, o);
        }
    }
    j.outvars.iter().map(|a| get(&env, a)).collect()
}

/// One equation of [`batch_jaxpr`] on its inputs in `env`.
fn batch_one(
    e: &crate::ir::Eqn,
    env: &Env<BVal>,
    get: &dyn Fn(&Env<BVal>, &Atom) -> Result<BVal>,
    b: usize,
    loc: &'static Location<'static>,
) -> Result<Vec<BVal>> {
    let ins = e.inputs.iter().map(|a| get(env, a)).collect::<Result<Vec<_>>>()?;
    let scalar_lit = |a: &Atom| matches!(a, Atom::Lit(l) if l.aval.shape.is_empty());
    let outs = if ins.iter().any(|v| v.batched) && e.primitive.is_binary_elementwise() && e.inputs.iter().any(scalar_lit) {
        // A 0-d literal operand stays a literal (JAX: `gt a 0.0:f32[]`), not a broadcast constant.
        let shape = &e.outputs[0].aval.shape;
        let ops = e
            .inputs
            .iter()
            .zip(&ins)
            .map(|(a, v)| match a {
                Atom::Lit(l) if l.aval.shape.is_empty() => Ok(Operand::Lit(l.value, l.aval.clone())),
                _ => to_full(v, b, shape).map(Operand::Array),
            })
            .collect::<Result<Vec<_>>>()?;
        bind(e.primitive.clone(), ops, loc)?.into_iter().map(|x| BVal { x, batched: true }).collect()
    } else if ins.iter().any(|v| v.batched) {
        batch_eqn(&e.primitive, &ins, &e.outputs.first().map(|o| o.aval.clone()).unwrap_or_else(|| ShapedArray::scalar(crate::ir::DType::Bool)), b, loc)?
    } else {
        let ops = e
            .inputs
            .iter()
            .zip(&ins)
            .map(|(a, v)| match a {
                Atom::Lit(l) => Operand::Lit(l.value, l.aval.clone()),
                Atom::Var(_) => arr(&v.x),
            })
            .collect();
        bind(e.primitive.clone(), ops, loc)?.into_iter().map(|x| BVal { x, batched: false }).collect()
    };
    Ok(outs)
}

/// `jax.vmap(f, in_axes, out_axes)`: maps `f` over axis `in_axes[i]` of each argument
/// leaf (`None`: not mapped; an empty slice maps axis 0 of every leaf) and puts the
/// mapped axis of every output at `out_axis`.
/// Errors: inconsistent mapped sizes, axes out of range, missing batching rules.
pub fn vmap_axes<'a, A: Pytree, O: TraceOutput>(
    f: impl Fn(A) -> O + 'a,
    in_axes: Vec<Option<usize>>,
    out_axis: usize,
) -> impl Fn(A) -> Result<O::Out> + 'a {
    move |a: A| {
        let mut flat = Flat::default();
        a.flatten(&mut flat);
        let leaves: Vec<Array> = flat
            .leaves
            .iter()
            .map(|l| match l {
                ArgLeaf::Value(a) => Ok(a.clone()),
                ArgLeaf::Spec(_) => Err(Error::type_error("vmap needs array values")),
            })
            .collect::<Result<_>>()?;
        let axes: Vec<Option<usize>> = if in_axes.is_empty() { vec![Some(0); leaves.len()] } else { in_axes.clone() };
        if axes.len() != leaves.len() {
            return Err(Error::value_error(format!(
                "vmap in_axes has {} entries but the arguments have {} leaves",
                axes.len(),
                leaves.len()
            )));
        }
        let mut size: Option<usize> = None;
        let mut args = Vec::new();
        let mut avals = Vec::new();
        // Each leaf's per-example type: its sharding without the mapped dim (JAX's
        // `float32[4@Y]` for a row of `float32[8@X,4@Y]`), so `typeof_` inside shows it and
        // `with_sharding_constraint`'s explicit-mode assert sees it.
        let types: Vec<Option<crate::sharding_types::ValueType>> = crate::sharding_types::leaf_types(&flat)
            .into_iter()
            .zip(&axes)
            .map(|(t, ax)| {
                let mut t = t?;
                if let (Some(ax), Some(s)) = (ax, t.sharding.as_mut()) {
                    if *ax < s.spec.0.len() {
                        s.spec.0.remove(*ax);
                    }
                }
                Some(t)
            })
            .collect();
        for (x, ax) in leaves.iter().zip(&axes) {
            match ax {
                Some(ax) => {
                    if *ax >= x.ndim() {
                        return Err(Error::value_error(format!(
                            "vmap was requested to map its argument along axis {ax}, which implies that its rank should be at least {}, but is only {} (its shape is {:?})",
                            ax + 1,
                            x.ndim(),
                            x.shape()
                        )));
                    }
                    let n = x.shape()[*ax];
                    if let Some(s) = size {
                        if s != n {
                            return Err(Error::value_error(format!(
                                "vmap got inconsistent sizes for array axes to be mapped: {s} and {n}"
                            )));
                        }
                    }
                    size = Some(n);
                    let moved = move_axis(x, *ax, 0)?;
                    let mut aval = moved.aval();
                    aval.shape.remove(0);
                    avals.push(aval);
                    args.push(BVal { x: moved, batched: true });
                }
                None => {
                    avals.push(x.aval());
                    args.push(BVal { x: x.clone(), batched: false });
                }
            }
        }
        let b = size.ok_or_else(|| Error::value_error("vmap must have at least one non-None value in in_axes"))?;
        let mut out_flat = Flat::default();
        let j = trace_to_jaxpr("vmap", &avals, |tracers| {
            crate::sharding_types::type_innermost_args(types.clone());
            let a = unflatten_like::<A>(&flat.treedef, tracers, flat.statics.clone())?;
            let r = f(a).into_result()?;
            out_flat = flatten_value(&r);
            out_flat
                .leaves
                .iter()
                .map(|l| match l {
                    ArgLeaf::Value(a) => Ok(a.clone()),
                    ArgLeaf::Spec(_) => Err(Error::type_error("vmap output must be arrays")),
                })
                .collect()
        })?;
        let outs = batch_jaxpr(&j.jaxpr, &j.consts, args, b)?;
        let outs = outs
            .into_iter()
            .map(|v| {
                let x = if v.batched { v.x } else { to_full(&v, b, &v.x.shape())? };
                if out_axis >= x.ndim() {
                    return Err(Error::value_error(format!("vmap out_axes={out_axis} is out of range for an output of rank {}", x.ndim())));
                }
                move_axis(&x, 0, out_axis)
            })
            .collect::<Result<Vec<_>>>()?;
        unflatten_like::<O::Out>(&out_flat.treedef, outs, out_flat.statics)
    }
}

/// `jax.vmap(f)`: maps `f` over axis 0 of every argument leaf; outputs are stacked on
/// axis 0.
pub fn vmap<'a, A: Pytree, O: TraceOutput>(f: impl Fn(A) -> O + 'a) -> impl Fn(A) -> Result<O::Out> + 'a {
    vmap_axes(f, vec![], 0)
}
