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
struct BVal {
    x: Array,
    batched: bool,
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
fn to_full(v: &BVal, b: usize, shape: &[usize]) -> Result<Array> {
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

/// The batched result of one equation.
fn batch_eqn(p: &Primitive, ins: &[BVal], out: &ShapedArray, b: usize, loc: &'static Location<'static>) -> Result<Vec<BVal>> {
    use Primitive::*;
    let one = |x: Array| Ok(vec![BVal { x, batched: true }]);
    match p {
        _ if p.is_unary_elementwise() || matches!(p, ConvertElementType { .. } | StopGradient) => {
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
        DotGeneral { lhs_contracting, rhs_contracting, lhs_batch, rhs_batch, preferred_element_type } => {
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
                        preferred_element_type: pet,
                    };
                    one(lax::bind1(p, vec![arr(&l.x), arr(&r.x)])?)
                }
                (true, false) => {
                    let p = DotGeneral {
                        lhs_contracting: shift(lhs_contracting),
                        rhs_contracting: rhs_contracting.clone(),
                        lhs_batch: shift(lhs_batch),
                        rhs_batch: rhs_batch.clone(),
                        preferred_element_type: pet,
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
                        preferred_element_type: pet,
                    };
                    let y = lax::bind1(p, vec![arr(&l.x), arr(&r.x)])?;
                    let lhs_free = l.x.ndim() - lhs_contracting.len() - lhs_batch.len();
                    one(move_axis(&y, lhs_batch.len() + lhs_free, 0)?)
                }
                (false, false) => unreachable!("handled by the caller"),
            }
        }
        DebugCallback { .. } => {
            bind(p.clone(), ins.iter().map(|v| arr(&v.x)).collect(), loc)?;
            Ok(vec![])
        }
        _ => Err(Error::type_error(format!("Batching rule for '{}' not implemented", p.name()))),
    }
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
        let ins = e.inputs.iter().map(|a| get(&env, a)).collect::<Result<Vec<_>>>()?;
        let outs = if ins.iter().any(|v| v.batched) {
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
        for (v, o) in e.outputs.iter().zip(outs) {
            env.set(v, o);
        }
    }
    j.outvars.iter().map(|a| get(&env, a)).collect()
}

/// `jax.vmap(f, in_axes, out_axes)`: maps `f` over axis `in_axes[i]` of each argument
/// leaf (`None`: not mapped; an empty slice maps axis 0 of every leaf) and puts the
/// mapped axis of every output at `out_axis`.
/// Errors: inconsistent mapped sizes, axes out of range, missing batching rules.
pub fn vmap_axes<A: Pytree, O: TraceOutput>(
    f: impl Fn(A) -> O + 'static,
    in_axes: Vec<Option<usize>>,
    out_axis: usize,
) -> impl Fn(A) -> Result<O::Out> + 'static {
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
pub fn vmap<A: Pytree, O: TraceOutput>(f: impl Fn(A) -> O + 'static) -> impl Fn(A) -> Result<O::Out> + 'static {
    vmap_axes(f, vec![], 0)
}
