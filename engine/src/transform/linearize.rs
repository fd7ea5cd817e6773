//! `jax.linearize`: `f`'s primal outputs and its JVP as a linear function of the
//! tangents alone, with the primal computation done once, now.
//!
//! As in JAX (<https://docs.jax.dev/en/latest/autodidax.html#partial-evaluation>),
//! `f`'s jvp is traced with both primals and tangents as inputs, and the resulting
//! jaxpr is partially evaluated with the primals known and the tangents unknown:
//! equations whose inputs are all known are evaluated at once (binding them, so under
//! an enclosing trace they are staged there); the others form the *linear jaxpr*, whose
//! constvars ("residuals") are the known values those equations read.
//!
//! Control flow: an equation with a sub-jaxpr (`cond`, `scan`, `while`, `remat2`, ...)
//! and any unknown input is kept whole in the linear jaxpr (its known inputs become
//! residuals), so the primal part of that one equation is recomputed on each call of
//! the linear function. Its outputs that do not depend on the tangents (found by a
//! dependency analysis through the sub-jaxprs; for `scan`/`while` carries, to a fixed
//! point) are also evaluated now, with zero tangents, so that later known equations and
//! the primal outputs need no tangents. JAX splits such equations into a known and an
//! unknown part (`pe.partial_eval_jaxpr_nounits`); we do not.

use super::ad::{jvp_jaxpr, leaves_of, zeros};
use super::interp::{atom_array, eval_jaxpr, operand, trace_to_jaxpr, Env};
use super::jit::TraceOutput;
use crate::error::{Error, Result};
use crate::ir::{Atom, ClosedJaxpr, Eqn, Jaxpr, Primitive, ShapedArray, Var};
use crate::trace::pytree::{flatten_value, unflatten_like, ArgLeaf, Flat, Pytree, StaticValue, TreeDef};
use crate::trace::{bind, Array, Operand};
use std::collections::HashSet;
use std::marker::PhantomData;
use std::panic::Location;

/// The linear function returned by [`linearize`]: `call(tangents)` is `f`'s jvp
/// tangent output at the linearization point, computed from the linear jaxpr and its
/// residuals only (no primal equation runs again, except inside control flow; see the
/// module docs). It binds ordinary primitives, so it composes with `jit`, `vmap`
/// (batched tangents), `jvp`, `grad` and `linearize`.
#[derive(Clone)]
pub struct Linearized<A, Out> {
    jaxpr: Jaxpr,
    consts: Vec<Array>,
    in_tree: TreeDef,
    in_avals: Vec<ShapedArray>,
    out_tree: TreeDef,
    out_statics: Vec<StaticValue>,
    _p: PhantomData<fn(A) -> Out>,
}

impl<A: Pytree, Out: Pytree> Linearized<A, Out> {
    /// The tangent outputs of `f` for `tangents` (same structure, shapes and dtypes as
    /// the primals). Errors (`TypeError`): a different structure, shape or dtype.
    #[track_caller]
    pub fn call(&self, tangents: &A) -> Result<Out> {
        let mut tf = Flat::default();
        tangents.flatten(&mut tf);
        if tf.treedef != self.in_tree {
            return Err(Error::type_error(format!(
                "linearized function: tangent argument structure {} differs from the primal structure {}",
                tf.treedef, self.in_tree
            )));
        }
        let mut leaves = Vec::with_capacity(tf.leaves.len());
        for (l, want) in tf.leaves.iter().zip(&self.in_avals) {
            let a = match l {
                ArgLeaf::Value(a) => a.clone(),
                ArgLeaf::Spec(_) => return Err(Error::type_error("linearized function: tangents must be arrays, not ShapeDtypeStruct specs")),
            };
            let got = a.aval();
            if got.shape != want.shape || got.dtype != want.dtype {
                return Err(Error::type_error(format!(
                    "linearized function called with tangent of shape {:?} and dtype {}, expected shape {:?} and dtype {} (the primal's)",
                    got.shape,
                    got.dtype.name(),
                    want.shape,
                    want.dtype.name()
                )));
            }
            leaves.push(a);
        }
        let outs = eval_jaxpr(&self.jaxpr, &self.consts, &leaves)?;
        unflatten_like::<Out>(&self.out_tree, outs, self.out_statics.clone())
    }

    /// The linear jaxpr with its residuals as constants: what `jax.make_jaxpr(f_jvp)`
    /// prints in JAX. Errors: the residuals are tracers (linearize ran under a trace).
    pub fn jaxpr(&self) -> Result<ClosedJaxpr> {
        let consts = self.consts.iter().map(|c| c.buffer()).collect::<Result<Vec<_>>>()?;
        Ok(ClosedJaxpr { jaxpr: self.jaxpr.clone(), consts, in_types: None })
    }

    /// The residuals: the known values the linear jaxpr reads (one per constvar).
    pub fn residuals(&self) -> &[Array] {
        &self.consts
    }
}



/// What [`linearize`] returns: `f`'s outputs and the linear function.
pub type LinearizeResult<A, Out> = Result<(Out, Linearized<A, Out>)>;

/// `jax.linearize(f, primals)`: `f(primals)` and the linear function `t ↦ jvp(f,
/// primals, t).1`. `f` is traced once and its primal equations are evaluated once,
/// here; see [`Linearized`] and the module docs for the partial evaluation.
/// Errors: tracing errors, missing jvp rules, spec (non-array) leaves.
#[track_caller]
pub fn linearize<A: Pytree, O: TraceOutput>(f: impl Fn(A) -> O, primals: &A) -> LinearizeResult<A, O::Out> {
    let loc = Location::caller();
    let mut pf = Flat::default();
    primals.flatten(&mut pf);
    let leaves = leaves_of(&pf)?;
    let avals: Vec<ShapedArray> = leaves.iter().map(|a| a.aval()).collect();
    let n = leaves.len();
    let mut out_flat = Flat::default();
    let fj = trace_to_jaxpr("linearize", &avals, |tracers| {
        let a = unflatten_like::<A>(&pf.treedef, tracers, pf.statics.clone())?;
        let r = f(a).into_result()?;
        out_flat = flatten_value(&r);
        leaves_of(&out_flat)
    })?;
    let n_out = fj.jaxpr.outvars.len();
    // The jvp jaxpr over (primals, tangents) -> (outs, tangent outs).
    let both: Vec<ShapedArray> = avals.iter().chain(avals.iter()).cloned().collect();
    let jj = trace_to_jaxpr("linearize", &both, |xs| {
        let (ps, ts) = xs.split_at(n);
        let ts: Vec<Option<Array>> = ts.iter().cloned().map(Some).collect();
        let (outs, touts) = jvp_jaxpr(&fj.jaxpr, &fj.consts, ps, &ts)?;
        let touts = touts
            .into_iter()
            .zip(&outs)
            .map(|(t, o)| t.map(Ok).unwrap_or_else(|| zeros(&o.aval())))
            .collect::<Result<Vec<_>>>()?;
        Ok(outs.into_iter().chain(touts).collect())
    })?;
    let j = &jj.jaxpr;

    // Partial evaluation.
    let mut known: Env<Array> = Env::new();
    let mut unknown: HashSet<u32> = HashSet::new();
    for (v, c) in j.constvars.iter().zip(&jj.consts) {
        known.set(v, c.clone());
    }
    for (v, x) in j.invars[..n].iter().zip(&leaves) {
        known.set(v, x.clone());
    }
    for v in &j.invars[n..] {
        unknown.insert(v.id);
    }
    let is_unk = |unknown: &HashSet<u32>, a: &Atom| matches!(a, Atom::Var(v) if unknown.contains(&v.id));
    let mut lin_eqns: Vec<Eqn> = Vec::new();
    for e in &j.eqns {
        let in_unk: Vec<bool> = e.inputs.iter().map(|a| is_unk(&unknown, a)).collect();
        if !in_unk.iter().any(|&u| u) {
            let outs = eval_eqn(e, &known, &HashSet::new(), loc)?;
            for (v, o) in e.outputs.iter().zip(outs) {
                known.set(v, o);
            }
            continue;
        }
        let out_unk = unknown_outputs(&e.primitive, &in_unk, e.outputs.len());
        if out_unk.iter().any(|&u| !u) {
            // Mixed: evaluate now with zero tangents for the known outputs.
            let outs = eval_eqn(e, &known, &unknown, loc)?;
            for ((v, o), &u) in e.outputs.iter().zip(outs).zip(&out_unk) {
                if !u {
                    known.set(v, o);
                }
            }
        }
        for (v, &u) in e.outputs.iter().zip(&out_unk) {
            if u {
                unknown.insert(v.id);
            }
        }
        lin_eqns.push(e.clone());
    }
    let outs = j.outvars[..n_out]
        .iter()
        .map(|a| {
            if is_unk(&unknown, a) {
                return Err(Error::runtime("internal: linearize: a primal output depends on the tangents"));
            }
            atom_array(&known, a)
        })
        .collect::<Result<Vec<_>>>()?;
    let tout_atoms: Vec<Atom> = j.outvars[n_out..].to_vec();

    // Dead-code elimination of the linear equations (effects are kept).
    let mut live: HashSet<u32> = tout_atoms.iter().filter_map(|a| if let Atom::Var(v) = a { Some(v.id) } else { None }).collect();
    let mut kept: Vec<Eqn> = Vec::new();
    for e in lin_eqns.into_iter().rev() {
        if e.primitive.has_effects() || e.outputs.iter().any(|v| live.contains(&v.id)) {
            for a in &e.inputs {
                if let Atom::Var(v) = a {
                    live.insert(v.id);
                }
            }
            kept.push(e);
        }
    }
    kept.reverse();

    // Residuals: vars read by the linear jaxpr but not defined in it.
    let mut defined: HashSet<u32> = j.invars[n..].iter().map(|v| v.id).collect();
    let mut constvars: Vec<Var> = Vec::new();
    let mut consts: Vec<Array> = Vec::new();
    let mut seen: HashSet<u32> = HashSet::new();
    let mut need = |a: &Atom, defined: &HashSet<u32>, constvars: &mut Vec<Var>, consts: &mut Vec<Array>| -> Result<()> {
        if let Atom::Var(v) = a
            && !defined.contains(&v.id)
            && seen.insert(v.id)
        {
            consts.push(known.get(v)?);
            constvars.push(v.clone());
        }
        Ok(())
    };
    for e in &kept {
        for a in &e.inputs {
            need(a, &defined, &mut constvars, &mut consts)?;
        }
        for v in &e.outputs {
            defined.insert(v.id);
        }
    }
    for a in &tout_atoms {
        need(a, &defined, &mut constvars, &mut consts)?;
    }
    let lin = Jaxpr { constvars, invars: j.invars[n..].to_vec(), eqns: kept, outvars: tout_atoms };
    let out = unflatten_like::<O::Out>(&out_flat.treedef, outs, out_flat.statics.clone())?;
    Ok((
        out,
        Linearized {
            jaxpr: lin,
            consts,
            in_tree: pf.treedef.clone(),
            in_avals: avals,
            out_tree: out_flat.treedef,
            out_statics: out_flat.statics,
            _p: PhantomData,
        },
    ))
}

/// Evaluates one equation on known values, with zeros for the variables in `unknown`.
fn eval_eqn(e: &Eqn, known: &Env<Array>, unknown: &HashSet<u32>, loc: &'static Location<'static>) -> Result<Vec<Array>> {
    let ops = e
        .inputs
        .iter()
        .map(|a| match a {
            Atom::Var(v) if unknown.contains(&v.id) => Ok(Operand::Array(zeros(&v.aval)?)),
            _ => operand(known, a),
        })
        .collect::<Result<Vec<_>>>()?;
    if let Primitive::Pjit { jaxpr, .. } = &e.primitive {
        let consts: Vec<Array> = jaxpr.consts.iter().map(|b| Array::from_buffer((**b).clone(), false)).collect();
        let ins = ops
            .into_iter()
            .map(|o| match o {
                Operand::Array(a) => Ok(a),
                Operand::Lit(v, aval) => super::interp::literal_array(v, &aval),
            })
            .collect::<Result<Vec<_>>>()?;
        return eval_jaxpr(&jaxpr.jaxpr, &consts, &ins);
    }
    bind(e.primitive.clone(), ops, loc)
}

/// Which outputs of `j` depend on its unknown inputs (constvars are known).
fn jaxpr_unknown_outputs(j: &Jaxpr, in_unk: &[bool]) -> Vec<bool> {
    let mut unk: HashSet<u32> = HashSet::new();
    for (v, &u) in j.invars.iter().zip(in_unk) {
        if u {
            unk.insert(v.id);
        }
    }
    for e in &j.eqns {
        let iu: Vec<bool> = e.inputs.iter().map(|a| matches!(a, Atom::Var(v) if unk.contains(&v.id))).collect();
        if iu.iter().any(|&u| u) {
            for (v, u) in e.outputs.iter().zip(unknown_outputs(&e.primitive, &iu, e.outputs.len())) {
                if u {
                    unk.insert(v.id);
                }
            }
        }
    }
    j.outvars.iter().map(|a| matches!(a, Atom::Var(v) if unk.contains(&v.id))).collect()
}

/// Which outputs of an equation of `prim` depend on its unknown inputs: through the
/// sub-jaxprs of control flow, else all outputs as soon as one input is unknown.
fn unknown_outputs(prim: &Primitive, in_unk: &[bool], n_out: usize) -> Vec<bool> {
    let any = in_unk.iter().any(|&u| u);
    let all = vec![any; n_out];
    match prim {
        Primitive::Cond { branches } => {
            if in_unk.first().copied().unwrap_or(true) {
                return all;
            }
            let mut out = vec![false; n_out];
            for b in branches {
                if b.invars.len() != in_unk.len() - 1 || b.outvars.len() != n_out {
                    return all;
                }
                for (o, u) in out.iter_mut().zip(jaxpr_unknown_outputs(b, &in_unk[1..])) {
                    *o |= u;
                }
            }
            out
        }
        Primitive::Scan { jaxpr, num_consts, num_carry, .. } => {
            let (nc, nk) = (*num_consts, *num_carry);
            if jaxpr.invars.len() != in_unk.len() || jaxpr.outvars.len() != n_out || nc + nk > in_unk.len() {
                return all;
            }
            let mut carry: Vec<bool> = in_unk[nc..nc + nk].to_vec();
            loop {
                let mut ins = in_unk.to_vec();
                ins[nc..nc + nk].copy_from_slice(&carry);
                let outs = jaxpr_unknown_outputs(jaxpr, &ins);
                let next: Vec<bool> = carry.iter().zip(&outs[..nk]).map(|(a, b)| *a || *b).collect();
                if next == carry {
                    return carry.into_iter().chain(outs[nk..].iter().copied()).collect();
                }
                carry = next;
            }
        }
        Primitive::While { cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts } => {
            let (cn, bn) = (*cond_nconsts, *body_nconsts);
            if cn + bn + n_out != in_unk.len() || body_jaxpr.invars.len() != bn + n_out || cond_jaxpr.invars.len() != cn + n_out {
                return all;
            }
            let mut carry: Vec<bool> = in_unk[cn + bn..].to_vec();
            loop {
                let mut cin = in_unk[..cn].to_vec();
                cin.extend(&carry);
                if jaxpr_unknown_outputs(cond_jaxpr, &cin).iter().any(|&u| u) {
                    return all;
                }
                let mut bin = in_unk[cn..cn + bn].to_vec();
                bin.extend(&carry);
                let outs = jaxpr_unknown_outputs(body_jaxpr, &bin);
                let next: Vec<bool> = carry.iter().zip(&outs).map(|(a, b)| *a || *b).collect();
                if next == carry {
                    return carry;
                }
                carry = next;
            }
        }
        Primitive::Checkpoint { jaxpr, .. } if jaxpr.invars.len() == in_unk.len() && jaxpr.outvars.len() == n_out => {
            jaxpr_unknown_outputs(jaxpr, in_unk)
        }
        Primitive::Pjit { jaxpr, .. } if jaxpr.jaxpr.invars.len() == in_unk.len() && jaxpr.jaxpr.outvars.len() == n_out => {
            jaxpr_unknown_outputs(&jaxpr.jaxpr, in_unk)
        }
        _ => all,
    }
}
