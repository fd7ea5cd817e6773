//! User-defined differentiation and rematerialization: `custom_jvp`, `custom_vjp` and
//! `checkpoint`. Each stages a call-like primitive whose body is inlined when compiled;
//! the differentiation interpreters (`ad.rs`) consult the user's rules instead of the
//! body, and `vmap` keeps the primitive with a batched body and a batched rule
//! (`batched_rule`), so differentiating a vmapped function still uses the rule. See <https://docs.jax.dev/en/latest/notebooks/Custom_derivative_rules_for_Python_code.html>
//! and <https://docs.jax.dev/en/latest/gradient-checkpointing.html>.

use super::interp::{trace_to_jaxpr, OpenJaxpr};
use super::jit::TraceOutput;
use crate::error::{Error, Result};
use crate::ir::{Primitive, RematPolicy, RuleId, ShapedArray};
use crate::lax::control::close;
use crate::trace::pytree::{flatten_value, unflatten_like, ArgLeaf, Flat, Pytree, TreeDef};
use crate::trace::{bind, Array, Operand};
use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::Location;
use std::rc::Rc;

/// A JVP rule over flat values: `(primals, tangents) -> (outputs, output tangents)`.
pub type JvpRuleFn = Rc<dyn Fn(&[Array], &[Array]) -> Result<(Vec<Array>, Vec<Array>)>>;
/// `fwd`: `primals -> (outputs, residuals)`; `bwd`: `(residuals, output cts) -> input cts`.
pub type FwdFn = Rc<dyn Fn(&[Array]) -> Result<(Vec<Array>, Vec<Array>)>>;
pub type BwdFn = Rc<dyn Fn(&[Array], &[Array]) -> Result<Vec<Array>>>;

#[derive(Clone)]
pub enum Rule {
    Jvp(JvpRuleFn),
    Vjp(FwdFn, BwdFn),
}

thread_local! {
    static RULES: RefCell<HashMap<RuleId, Rule>> = RefCell::new(HashMap::new());
}

fn register(r: Rule) -> RuleId {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    RULES.with(|m| m.borrow_mut().insert(id, r));
    id
}

/// The rule registered under `id` (on this thread).
pub fn rule(id: RuleId) -> Result<Rule> {
    RULES.with(|m| m.borrow().get(&id).cloned()).ok_or_else(|| Error::runtime(format!("custom rule {id} is not registered on this thread")))
}

fn leaves(flat: &Flat) -> Result<Vec<Array>> {
    if !flat.statics.is_empty() {
        return Err(Error::type_error("custom_jvp/custom_vjp/checkpoint arguments cannot contain Static values"));
    }
    flat.leaves
        .iter()
        .map(|l| match l {
            ArgLeaf::Value(a) => Ok(a.clone()),
            ArgLeaf::Spec(_) => Err(Error::type_error("custom rules need array values")),
        })
        .collect()
}

fn trace_fn<A: Pytree, O: TraceOutput>(f: &dyn Fn(A) -> O, flat: &Flat) -> Result<(OpenJaxpr, Flat)> {
    let avals: Vec<ShapedArray> = flat.leaves.iter().map(|l| l.aval()).collect();
    let mut out = Flat::default();
    let j = trace_to_jaxpr("custom", &avals, |ts| {
        let a = unflatten_like::<A>(&flat.treedef, ts, vec![])?;
        let r = f(a).into_result()?;
        out = flatten_value(&r);
        leaves(&out)
    })?;
    Ok((j, out))
}

/// Binds a call-like primitive built by `make` from the traced body, with the body's
/// constants as leading operands.
#[track_caller]
fn call<R: Pytree>(j: OpenJaxpr, out: Flat, args: Vec<Array>, make: impl FnOnce(Box<crate::ir::Jaxpr>, usize) -> Primitive) -> Result<R> {
    let nconsts = j.consts.len();
    let mut operands: Vec<Operand> = j.consts.iter().cloned().map(Operand::Array).collect();
    operands.extend(args.into_iter().map(Operand::Array));
    let p = make(Box::new(close(&j.jaxpr)), nconsts);
    let outs = bind(p, operands, Location::caller())?;
    unflatten_like::<R>(&out.treedef, outs, out.statics)
}

/// The rule of a custom call batched by `vmap`: the rule `id` mapped over dimension 0 of
/// every value it takes and returns (all arguments of a batched call are batch-first).
/// JVP rules map `(primals, tangents)`; VJP rules map `fwd` over the primals and `bwd`
/// over `(residuals, cotangents)`. Returns the new rule's id.
pub(crate) fn batched_rule(id: RuleId) -> Result<RuleId> {
    use super::batching::vmap;
    Ok(match rule(id)? {
        Rule::Jvp(r) => register(Rule::Jvp(Rc::new(move |p: &[Array], t: &[Array]| {
            let r = r.clone();
            vmap(move |(p, t): (Vec<Array>, Vec<Array>)| r(&p, &t))((p.to_vec(), t.to_vec()))
        }))),
        Rule::Vjp(fwd, bwd) => {
            let fwd2: FwdFn = Rc::new(move |p: &[Array]| {
                let fwd = fwd.clone();
                vmap(move |p: Vec<Array>| fwd(&p))(p.to_vec())
            });
            let bwd2: BwdFn = Rc::new(move |res: &[Array], cts: &[Array]| {
                let bwd = bwd.clone();
                vmap(move |(r, c): (Vec<Array>, Vec<Array>)| bwd(&r, &c))((res.to_vec(), cts.to_vec()))
            });
            register(Rule::Vjp(fwd2, bwd2))
        }
    })
}

/// `jax.custom_jvp(f)` with `f.defjvp(rule)`: `rule(primals, tangents)` returns
/// `(f(primals), tangent of the output)`. Differentiation uses the rule (reverse mode
/// transposes it); evaluation uses `f`.
pub fn custom_jvp<A: Pytree, O: TraceOutput>(
    f: impl Fn(A) -> O + 'static,
    rule: impl Fn(A, A) -> Result<(O::Out, O::Out)> + 'static,
) -> impl Fn(A) -> Result<O::Out> + 'static {
    // The argument structure of the latest call (the rule runs after it, when differentiating).
    let arg_def: Rc<RefCell<TreeDef>> = Rc::new(RefCell::new(TreeDef::Leaf));
    let ad = arg_def.clone();
    let id = register(Rule::Jvp(Rc::new(move |p: &[Array], t: &[Array]| {
        let def = ad.borrow().clone();
        let a = unflatten_like::<A>(&def, p.to_vec(), vec![])?;
        let ta = unflatten_like::<A>(&def, t.to_vec(), vec![])?;
        let (o, to) = rule(a, ta)?;
        Ok((leaves(&flatten_value(&o))?, leaves(&flatten_value(&to))?))
    })));
    move |a: A| {
        let flat = flatten_value(&a);
        *arg_def.borrow_mut() = flat.treedef.clone();
        let (j, out) = trace_fn(&f, &flat)?;
        call(j, out, leaves(&flat)?, |call_jaxpr, num_consts| Primitive::CustomJvpCall { name: "f".into(), call_jaxpr, rule: id, num_consts })
    }
}

/// `jax.custom_vjp(f)` with `f.defvjp(fwd, bwd)`: `fwd(x) -> (f(x), residuals)`,
/// `bwd(residuals, output cotangent) -> cotangent of x`. Forward-mode differentiation
/// of it is an error, as in JAX.
pub fn custom_vjp<A: Pytree, O: TraceOutput, Res: Pytree>(
    f: impl Fn(A) -> O + 'static,
    fwd: impl Fn(A) -> Result<(O::Out, Res)> + 'static,
    bwd: impl Fn(Res, O::Out) -> Result<A> + 'static,
) -> impl Fn(A) -> Result<O::Out> + 'static {
    // Structures of the latest call's argument and output and of the residuals of the
    // latest `fwd` (the rules run after them, when differentiating).
    let defs: Rc<RefCell<(TreeDef, TreeDef, TreeDef)>> = Rc::new(RefCell::new((TreeDef::Leaf, TreeDef::Leaf, TreeDef::Leaf)));
    let (df, db) = (defs.clone(), defs.clone());
    let fwd_fn: FwdFn = Rc::new(move |p: &[Array]| {
        let arg_def = df.borrow().0.clone();
        let (o, r) = fwd(unflatten_like::<A>(&arg_def, p.to_vec(), vec![])?)?;
        let rf = flatten_value(&r);
        df.borrow_mut().2 = rf.treedef.clone();
        Ok((leaves(&flatten_value(&o))?, leaves(&rf)?))
    });
    let bwd_fn: BwdFn = Rc::new(move |res: &[Array], cts: &[Array]| {
        let (_, out_def, res_def) = db.borrow().clone();
        let r = unflatten_like::<Res>(&res_def, res.to_vec(), vec![])?;
        let c = unflatten_like::<O::Out>(&out_def, cts.to_vec(), vec![])?;
        leaves(&flatten_value(&bwd(r, c)?))
    });
    let id = register(Rule::Vjp(fwd_fn, bwd_fn));
    move |a: A| {
        let flat = flatten_value(&a);
        let (j, out) = trace_fn(&f, &flat)?;
        *defs.borrow_mut() = (flat.treedef.clone(), out.treedef.clone(), TreeDef::Leaf);
        call(j, out, leaves(&flat)?, |call_jaxpr, num_consts| Primitive::CustomVjpCall { name: "f".into(), call_jaxpr, rule: id, num_consts })
    }
}

/// `jax.checkpoint(f, policy=...)` (remat): `f`'s intermediates are recomputed during
/// the backward pass instead of being kept, except what `policy` saves.
pub fn checkpoint_with_policy<A: Pytree, O: TraceOutput>(f: impl Fn(A) -> O + 'static, policy: RematPolicy) -> impl Fn(A) -> Result<O::Out> + 'static {
    move |a: A| {
        let flat = flatten_value(&a);
        let (j, out) = trace_fn(&f, &flat)?;
        if !j.consts.is_empty() {
            // Closed-over values become leading operands of the checkpointed body.
            let nconsts = j.consts.len();
            let mut operands: Vec<Operand> = j.consts.iter().cloned().map(Operand::Array).collect();
            operands.extend(leaves(&flat)?.into_iter().map(Operand::Array));
            let outs = bind(Primitive::Checkpoint { jaxpr: Box::new(close(&j.jaxpr)), policy }, operands, Location::caller())?;
            let _ = nconsts;
            return unflatten_like::<O::Out>(&out.treedef, outs, out.statics);
        }
        call(j, out, leaves(&flat)?, |jaxpr, _| Primitive::Checkpoint { jaxpr, policy })
    }
}

/// `jax.checkpoint(f)`: recompute everything in the backward pass.
pub fn checkpoint<A: Pytree, O: TraceOutput>(f: impl Fn(A) -> O + 'static) -> impl Fn(A) -> Result<O::Out> + 'static {
    checkpoint_with_policy(f, RematPolicy::NothingSaveable)
}

/// Whether `policy` saves the result of equation `e` for the backward pass.
pub fn saveable(policy: RematPolicy, e: &crate::ir::Eqn) -> bool {
    match policy {
        RematPolicy::NothingSaveable => false,
        RematPolicy::EverythingSaveable => true,
        RematPolicy::DotsSaveable => matches!(e.primitive, Primitive::DotGeneral { .. }),
        RematPolicy::DotsWithNoBatchDimsSaveable => {
            matches!(&e.primitive, Primitive::DotGeneral { lhs_batch, .. } if lhs_batch.is_empty())
        }
    }
}
