//! Automatic differentiation as jaxpr interpreters: `jvp` pushes tangents forward
//! through a traced jaxpr, `vjp` evaluates it and pulls cotangents back. Both bind
//! ordinary primitives, so derivatives compose with `jit` (they are staged into the
//! enclosing trace) and with themselves (`grad(grad(f))`).
//! Reference: JAX's autodidax, <https://docs.jax.dev/en/latest/autodidax.html>.

use super::ad_rules::{add_opt, fit, jvp_rule, vjp_rule};
use super::interp::{atom_array, trace_to_jaxpr, Env, OpenJaxpr};
use super::jit::TraceOutput;
use crate::error::{Error, Result};
use crate::ir::{Atom, DType, Jaxpr, Primitive, Scalar, ShapedArray};
use crate::lax;
use crate::trace::pytree::{flatten_value, unflatten_like, ArgLeaf, Flat, Pytree};
use crate::trace::{bind, Array, Operand};
use std::panic::Location;

/// The array leaves of `flat`. Errors (`TypeError`): a leaf is a `ShapeDtypeStruct` spec.
pub(crate) fn leaves_of(flat: &Flat) -> Result<Vec<Array>> {
    flat.leaves
        .iter()
        .map(|l| match l {
            ArgLeaf::Value(a) => Ok(a.clone()),
            ArgLeaf::Spec(_) => Err(Error::type_error("differentiation needs array values, not ShapeDtypeStruct specs")),
        })
        .collect()
}

/// How the function `f` passed to transformation `transform` at `loc` is named in tracing
/// errors: `f at cell 2, line 1 for grad` (an `fn` item's name, `<lambda>` for a closure, as
/// `jit` names it; JAX's "while tracing the function f at FILE:LINE for jit").
fn describe<F>(_f: &F, loc: &Location<'_>, transform: &str) -> String {
    let name = super::item_name::<F>().unwrap_or_else(|| super::jit::LAMBDA.into());
    format!("{name} at {} for {transform}", crate::trace::source_info(loc).line_label())
}

/// Traces `f` at the leaves of `args` into a jaxpr over those leaves.
fn trace_flat<A: Pytree, O: TraceOutput>(f: &impl Fn(A) -> O, flat: &Flat, what: &str) -> Result<(OpenJaxpr, Flat)> {
    let avals: Vec<ShapedArray> = flat.leaves.iter().map(|l| l.aval()).collect();
    // `typeof_` inside the function shows the arguments' shardings.
    let types = crate::sharding_types::leaf_types(flat);
    let mut out_flat = Flat::default();
    let j = trace_to_jaxpr(what, &avals, |tracers| {
        crate::sharding_types::type_innermost_args(types);
        let a = unflatten_like::<A>(&flat.treedef, tracers, flat.statics.clone())?;
        let r = f(a).into_result()?;
        out_flat = flatten_value(&r);
        leaves_of(&out_flat)
    })?;
    Ok((j, out_flat))
}

/// Evaluates `j` with tangents (None = zero).
pub fn jvp_jaxpr(j: &Jaxpr, consts: &[Array], primals: &[Array], tangents: &[Option<Array>]) -> Result<(Vec<Array>, Vec<Option<Array>>)> {
    let loc = Location::caller();
    let mut p: Env<Array> = Env::new();
    let mut t: Env<Option<Array>> = Env::new();
    for (v, c) in j.constvars.iter().zip(consts) {
        p.set(v, c.clone());
        t.set(v, None);
    }
    for ((v, x), dx) in j.invars.iter().zip(primals).zip(tangents) {
        p.set(v, x.clone());
        t.set(v, dx.clone());
    }
    for e in &j.eqns {
        if let Primitive::Pjit { .. } = e.primitive {
            return Err(Error::type_error("internal: nested jit calls are inlined before differentiation"));
        }
        let ins = e.inputs.iter().map(|a| atom_array(&p, a)).collect::<Result<Vec<_>>>()?;
        let ops = e
            .inputs
            .iter()
            .map(|a| super::interp::operand(&p, a))
            .collect::<Result<Vec<Operand>>>()?;
        let ts: Vec<Option<Array>> = e
            .inputs
            .iter()
            .map(|a| match a {
                Atom::Var(v) => t.get(v),
                Atom::Lit(_) => Ok(None),
            })
            .collect::<Result<_>>()?;
        super::callbacks::jvp_check(&e.primitive, &ts)?;
        if let Some((outs, touts)) = custom_jvp_eqn(&e.primitive, &ins, &ts)? {
            for ((v, o), dt) in e.outputs.iter().zip(outs).zip(touts) {
                p.set(v, o);
                t.set(v, dt);
            }
            continue;
        }
        if let Some((outs, touts)) = super::ad_rules_ops::jvp_multi(&e.primitive, &ins, &ts)? {
            for ((v, o), dt) in e.outputs.iter().zip(outs).zip(touts) {
                p.set(v, o);
                t.set(v, dt);
            }
            continue;
        }
        if !e.primitive.sub_jaxprs().is_empty() {
            let (outs, touts) = super::control_ad::control_jvp(&e.primitive, &ins, &ts)?;
            for ((v, o), dt) in e.outputs.iter().zip(outs).zip(touts) {
                p.set(v, o);
                t.set(v, dt);
            }
            continue;
        }
        let outs = bind(e.primitive.clone(), ops, loc)?;
        for (i, (v, o)) in e.outputs.iter().zip(&outs).enumerate() {
            let dt = if i == 0 { jvp_rule(&e.primitive, &ins, &outs, &ts, &v.aval)? } else { None };
            p.set(v, o.clone());
            t.set(v, dt);
        }
    }
    let outs = j.outvars.iter().map(|a| atom_array(&p, a)).collect::<Result<Vec<_>>>()?;
    let touts = j
        .outvars
        .iter()
        .map(|a| match a {
            Atom::Var(v) => t.get(v),
            Atom::Lit(_) => Ok(None),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((outs, touts))
}

/// Evaluates `j` and returns its outputs and the cotangents of its inputs for the
/// output cotangents `cts` (None = zero).
pub fn vjp_jaxpr(j: &Jaxpr, consts: &[Array], primals: &[Array], cts: &[Option<Array>]) -> Result<(Vec<Array>, Vec<Option<Array>>)> {
    vjp_jaxpr_known(j, consts, primals, cts, &std::collections::HashMap::new())
}

/// What the forward pass of `vjp_jaxpr` keeps for one equation besides its values.
enum Extra {
    None,
    /// `custom_vjp` residuals from the user's `fwd`.
    Residuals(Vec<Array>),
    /// Values a `checkpoint` policy saved (by variable id of its body).
    Known(std::collections::HashMap<u32, Array>),
}

/// `vjp_jaxpr` where the equations whose outputs are all in `known` are not
/// re-evaluated (a checkpoint's saved values).
pub fn vjp_jaxpr_known(
    j: &Jaxpr,
    consts: &[Array],
    primals: &[Array],
    cts: &[Option<Array>],
    known: &std::collections::HashMap<u32, Array>,
) -> Result<(Vec<Array>, Vec<Option<Array>>)> {
    let loc = Location::caller();
    let mut p: Env<Array> = Env::new();
    for (v, c) in j.constvars.iter().zip(consts) {
        p.set(v, c.clone());
    }
    for (v, x) in j.invars.iter().zip(primals) {
        p.set(v, x.clone());
    }
    let mut saved: Vec<(Vec<Array>, Vec<Array>)> = Vec::with_capacity(j.eqns.len());
    let mut extras: Vec<Extra> = Vec::with_capacity(j.eqns.len());
    // Host callbacks are not differentiable: JAX's JVP error, before anything runs, for one
    // whose operands depend on the inputs (its tangent would be nonzero).
    let deps = if j.eqns.iter().any(|e| super::callbacks::ad_error(&e.primitive).is_some()) { super::callbacks::primal_deps(j) } else { Default::default() };
    for e in &j.eqns {
        if let Some(err) = super::callbacks::ad_error(&e.primitive) {
            if e.inputs.iter().any(|a| matches!(a, Atom::Var(v) if deps.contains(&v.id))) {
                return Err(err);
            }
        }
        let ins = e.inputs.iter().map(|a| atom_array(&p, a)).collect::<Result<Vec<_>>>()?;
        let ops = e.inputs.iter().map(|a| super::interp::operand(&p, a)).collect::<Result<Vec<Operand>>>()?;
        let (outs, extra) = if !e.outputs.is_empty() && e.outputs.iter().all(|o| known.contains_key(&o.id)) {
            (e.outputs.iter().map(|o| known[&o.id].clone()).collect(), Extra::None)
        } else {
            match &e.primitive {
                Primitive::CustomVjpCall { rule, num_consts, .. } => match super::custom::rule(*rule)? {
                    super::custom::Rule::Vjp(fwd, _) => {
                        let (o, r) = fwd(&ins[*num_consts..])?;
                        (o, Extra::Residuals(r))
                    }
                    _ => return Err(Error::runtime("internal: custom_vjp_call with a JVP rule")),
                },
                Primitive::Checkpoint { jaxpr, policy } if *policy != crate::ir::RematPolicy::NothingSaveable => {
                    let (o, saved_vals) = eval_saving(jaxpr, &ins, *policy)?;
                    (o, Extra::Known(saved_vals))
                }
                _ => (bind(e.primitive.clone(), ops, loc)?, Extra::None),
            }
        };
        for (v, o) in e.outputs.iter().zip(&outs) {
            p.set(v, o.clone());
        }
        saved.push((ins, outs));
        extras.push(extra);
    }
    let outs = j.outvars.iter().map(|a| atom_array(&p, a)).collect::<Result<Vec<_>>>()?;
    let mut ct: std::collections::HashMap<u32, Array> = std::collections::HashMap::new();
    let accum = |ct: &mut std::collections::HashMap<u32, Array>, id: u32, x: Array| -> Result<()> {
        let v = match ct.remove(&id) {
            Some(old) => add_opt(Some(old), Some(x))?.expect("some"),
            None => x,
        };
        ct.insert(id, v);
        Ok(())
    };
    for (a, c) in j.outvars.iter().zip(cts) {
        if let (Atom::Var(v), Some(c)) = (a, c) {
            accum(&mut ct, v.id, fit(c.clone(), &v.aval)?)?;
        }
    }
    for ((e, (ins, outs)), extra) in j.eqns.iter().zip(&saved).zip(&extras).rev() {
        if super::callbacks::ad_error(&e.primitive).is_some() {
            // Off the differentiated path (checked in the forward pass): no cotangent flows.
            for o in &e.outputs {
                ct.remove(&o.id);
            }
            continue;
        }
        let in_cts = if e.primitive.call_body().is_some() {
            let cts: Vec<Option<Array>> = e.outputs.iter().map(|o| ct.remove(&o.id)).collect();
            if cts.iter().all(|c| c.is_none()) {
                continue;
            }
            custom_vjp_eqn(&e.primitive, ins, outs, &cts, extra)?
        } else if !e.primitive.sub_jaxprs().is_empty() {
            let cts: Vec<Option<Array>> = e.outputs.iter().map(|o| ct.remove(&o.id)).collect();
            if cts.iter().all(|c| c.is_none()) {
                continue;
            }
            super::control_ad::control_vjp(&e.primitive, ins, &cts)?
        } else if super::ad_rules_ops::is_multi(&e.primitive) {
            let cts: Vec<Option<Array>> = e.outputs.iter().map(|o| ct.remove(&o.id)).collect();
            if cts.iter().all(|c| c.is_none()) {
                continue;
            }
            super::ad_rules_ops::vjp_multi(&e.primitive, ins, outs, &cts)?
        } else {
            let g = match e.outputs.first().and_then(|o| ct.remove(&o.id)) {
                Some(g) => g,
                None => continue,
            };
            vjp_rule(&e.primitive, ins, outs, &g)?
        };
        for (a, c) in e.inputs.iter().zip(in_cts) {
            if let (Atom::Var(v), Some(c)) = (a, c) {
                accum(&mut ct, v.id, c)?;
            }
        }
    }
    let in_cts = j.invars.iter().map(|v| ct.remove(&v.id)).collect();
    Ok((outs, in_cts))
}

fn zero_like(a: &Array) -> Result<Array> {
    zeros(&a.aval())
}

/// Zeros of `aval`'s shape and dtype (a staged `broadcast_in_dim` of a literal 0).
pub(crate) fn zeros(aval: &ShapedArray) -> Result<Array> {
    lax::bind1(
        Primitive::BroadcastInDim { shape: aval.shape.clone(), broadcast_dimensions: vec![] },
        vec![Operand::Lit(Scalar::F64(0.0).cast(aval.dtype), ShapedArray::new(&[], aval.dtype))],
    )
}

/// `jax.jvp(f, primals, tangents)`: `f`'s outputs and their tangents. `tangents` has
/// the structure of `primals`. Errors: tracing errors, missing rules.
#[track_caller]
pub fn jvp<A: Pytree, O: TraceOutput>(f: impl Fn(A) -> O, primals: &A, tangents: &A) -> Result<(O::Out, O::Out)> {
    let (mut pf, mut tf) = (Flat::default(), Flat::default());
    primals.flatten(&mut pf);
    tangents.flatten(&mut tf);
    if pf.treedef != tf.treedef {
        return Err(Error::type_error(format!(
            "jvp: primal and tangent arguments must have equal structure, got {} and {}",
            pf.treedef, tf.treedef
        )));
    }
    let (j, out_flat) = trace_flat(&f, &pf, &describe(&f, Location::caller(), "jvp"))?;
    let ts: Vec<Option<Array>> = leaves_of(&tf)?.into_iter().map(Some).collect();
    let (outs, touts) = jvp_jaxpr(&j.jaxpr, &j.consts, &leaves_of(&pf)?, &ts)?;
    let touts = touts.into_iter().zip(&outs).map(|(t, o)| t.map(Ok).unwrap_or_else(|| zero_like(o))).collect::<Result<Vec<_>>>()?;
    Ok((
        unflatten_like::<O::Out>(&out_flat.treedef, outs, out_flat.statics.clone())?,
        unflatten_like::<O::Out>(&out_flat.treedef, touts, out_flat.statics)?,
    ))
}

/// `jax.vjp(f, primals)` evaluated at once with output cotangents `cts`: returns
/// `f(primals)` and the cotangents of `primals` (zeros where none flow).
#[track_caller]
pub fn vjp<A: Pytree, O: TraceOutput>(f: impl Fn(A) -> O, primals: &A, cts: &O::Out) -> Result<(O::Out, A)> {
    let mut pf = Flat::default();
    primals.flatten(&mut pf);
    let (j, out_flat) = trace_flat(&f, &pf, &describe(&f, Location::caller(), "vjp"))?;
    let ct_leaves: Vec<Option<Array>> = leaves_of(&flatten_value(cts))?.into_iter().map(Some).collect();
    let leaves = leaves_of(&pf)?;
    let (outs, in_cts) = vjp_jaxpr(&j.jaxpr, &j.consts, &leaves, &ct_leaves)?;
    let grads = in_cts.into_iter().zip(&leaves).map(|(c, x)| c.map(Ok).unwrap_or_else(|| zero_like(x))).collect::<Result<Vec<_>>>()?;
    Ok((
        unflatten_like::<O::Out>(&out_flat.treedef, outs, out_flat.statics)?,
        unflatten_like::<A>(&pf.treedef, grads, pf.statics)?,
    ))
}

fn check_real_inputs(flat: &Flat) -> Result<()> {
    for l in &flat.leaves {
        let a = l.aval();
        if !a.dtype.is_float() {
            return Err(Error::type_error(format!(
                "grad requires real-valued inputs (input dtype that is a sub-dtype of np.floating), but got {}. \
                 If you want to use integer-valued inputs, use vjp or set allow_int to True.",
                a.dtype.name()
            )));
        }
    }
    Ok(())
}

/// `value_and_grad` on flattened arguments: `f`'s output leaves (the scalar value first,
/// then, with `has_aux`, the aux leaves, which get no cotangent, as in JAX), the output
/// structure, and the gradient leaves.
/// `desc` names `f` in tracing errors ([`describe`]).
fn value_and_grad_flat<A: Pytree, O: TraceOutput>(f: &impl Fn(A) -> O, flat: &Flat, has_aux: bool, desc: &str) -> Result<(Vec<Array>, Flat, Vec<Array>)> {
    check_real_inputs(flat)?;
    let (j, out_flat) = trace_flat(f, flat, desc)?;
    let outs_avals = j.jaxpr.out_avals();
    if (outs_avals.len() != 1 && !has_aux) || outs_avals.first().is_none_or(|a| !a.shape.is_empty()) {
        let shape = outs_avals.first().map(|a| format!("{:?}", a.shape)).unwrap_or_else(|| "()".into());
        return Err(Error::type_error(format!(
            "Gradient only defined for scalar-output functions. Output had shape: {shape}."
        )));
    }
    if !outs_avals[0].dtype.is_float() {
        return Err(Error::type_error(format!(
            "grad requires real-valued outputs (output dtype that is a sub-dtype of np.floating), but got {}.",
            outs_avals[0].dtype.name()
        )));
    }
    let one = Operand::Lit(Scalar::F64(1.0).cast(outs_avals[0].dtype), ShapedArray::new(&[], outs_avals[0].dtype));
    let seed = lax::bind1(Primitive::BroadcastInDim { shape: vec![], broadcast_dimensions: vec![] }, vec![one])?;
    let leaves = leaves_of(flat)?;
    let mut cts = vec![Some(seed)];
    cts.resize(outs_avals.len(), None);
    let (outs, cts) = vjp_jaxpr(&j.jaxpr, &j.consts, &leaves, &cts)?;
    let grads = cts
        .into_iter()
        .zip(&leaves)
        .map(|(c, x)| match c {
            Some(c) => fit(c, &x.aval().strong()),
            None => zero_like(x),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((outs, out_flat, grads))
}

/// `jax.grad(f)`: a function returning the gradient of the scalar-valued `f` with
/// respect to its whole argument (a pytree; `Static` parts are passed through).
/// Errors: non-scalar or non-float output, integer inputs, missing rules.
#[track_caller]
pub fn grad<'a, A: Pytree, O: TraceOutput<Out = Array>>(f: impl Fn(A) -> O + 'a) -> impl Fn(A) -> Result<A> + 'a {
    let desc = describe(&f, Location::caller(), "grad");
    // Errors of grad's own checks (scalar float output, float inputs, differentiation
    // rules) carry no line: they get the user's line that made the gradient function.
    let site = crate::trace::source_info(Location::caller());
    move |a: A| {
        let mut flat = Flat::default();
        a.flatten(&mut flat);
        let (_, _, grads) = value_and_grad_flat(&f, &flat, false, &desc).map_err(|e| e.at(Some(site.clone())))?;
        unflatten_like::<A>(&flat.treedef, grads, flat.statics)
    }
}

/// `jax.value_and_grad(f)`: `(f(x), grad(f)(x))` in one pass.
#[track_caller]
pub fn value_and_grad<'a, A: Pytree, O: TraceOutput<Out = Array>>(
    f: impl Fn(A) -> O + 'a,
) -> impl Fn(A) -> Result<(Array, A)> + 'a {
    let desc = describe(&f, Location::caller(), "value_and_grad");
    value_and_grad_named(f, desc)
}

/// [`value_and_grad`] with `f` named `desc` in tracing errors.
fn value_and_grad_named<'a, A: Pytree, O: TraceOutput<Out = Array>>(
    f: impl Fn(A) -> O + 'a,
    desc: String,
) -> impl Fn(A) -> Result<(Array, A)> + 'a {
    move |a: A| {
        let mut flat = Flat::default();
        a.flatten(&mut flat);
        let (v, _, grads) = value_and_grad_flat(&f, &flat, false, &desc)?;
        Ok((v.into_iter().next().expect("one output"), unflatten_like::<A>(&flat.treedef, grads, flat.statics)?))
    }
}

/// `jax.value_and_grad(f, argnums=...)`: differentiates only the positions `argnums` of
/// the argument tuple (0 for a function of one non-tuple argument); the other positions
/// are constants of the trace (so they may be integer arrays or anything else). The
/// gradient keeps the argument's whole structure, because Rust's types fix it: the
/// positions not in `argnums` hold zeros of their leaves' shapes and dtypes (JAX returns
/// only the selected positions). Errors: as `value_and_grad`, and `ValueError` for a
/// position past the end of the tuple.
#[track_caller]
pub fn value_and_grad_argnums<'a, A: Pytree, O: TraceOutput<Out = Array>>(
    f: impl Fn(A) -> O + 'a,
    argnums: &[usize],
) -> impl Fn(A) -> Result<(Array, A)> + 'a {
    let desc = describe(&f, Location::caller(), "value_and_grad");
    let argnums = argnums.to_vec();
    move |a: A| {
        let mut flat = Flat::default();
        a.flatten(&mut flat);
        let leaves = leaves_of(&flat)?;
        let ranges = flat.treedef.arg_leaf_ranges();
        let mut selected = vec![false; leaves.len()];
        for &p in &argnums {
            let r = ranges.get(p).ok_or_else(|| {
                Error::value_error(format!(
                    "jax.grad: argnums={argnums:?} refers to position {p}, but the function takes {} positional arguments",
                    ranges.len()
                ))
            })?;
            selected[r.clone()].iter_mut().for_each(|s| *s = true);
        }
        let (treedef, statics) = (flat.treedef.clone(), flat.statics.clone());
        let g = |xs: Vec<Array>| -> Result<Array> {
            let mut xs = xs.into_iter();
            let all = leaves.iter().zip(&selected).map(|(l, &s)| if s { xs.next().expect("one per selected leaf") } else { l.clone() }).collect();
            f(unflatten_like::<A>(&treedef, all, statics.clone())?).into_result()
        };
        let chosen: Vec<Array> = leaves.iter().zip(&selected).filter(|(_, s)| **s).map(|(l, _)| l.clone()).collect();
        let (v, gs) = value_and_grad_named(g, desc.clone())(chosen)?;
        let mut gs = gs.into_iter();
        let all = leaves
            .iter()
            .zip(&selected)
            .map(|(l, &s)| if s { Ok(gs.next().expect("one per selected leaf")) } else { zero_like(l) })
            .collect::<Result<Vec<_>>>()?;
        Ok((v, unflatten_like::<A>(&flat.treedef, all, flat.statics)?))
    }
}

/// `jax.grad(f, argnums=...)`: the gradient part of [`value_and_grad_argnums`].
#[track_caller]
pub fn grad_argnums<'a, A: Pytree, O: TraceOutput<Out = Array>>(f: impl Fn(A) -> O + 'a, argnums: &[usize]) -> impl Fn(A) -> Result<A> + 'a {
    let vg = value_and_grad_argnums(f, argnums);
    move |a: A| vg(a).map(|(_, g)| g)
}

/// `jax.value_and_grad(f, has_aux=True)`: `f` returns `(value, aux)`; the result is
/// `((value, aux), grad)`. `aux` is an output of the same trace that receives no
/// cotangent (so it may depend on traced values, under `jit` too).
#[track_caller]
pub fn value_and_grad_with_aux<'a, A: Pytree, X: Pytree, O: TraceOutput<Out = (Array, X)>>(
    f: impl Fn(A) -> O + 'a,
) -> impl Fn(A) -> Result<((Array, X), A)> + 'a {
    let desc = describe(&f, Location::caller(), "value_and_grad");
    move |a: A| {
        let mut flat = Flat::default();
        a.flatten(&mut flat);
        let (outs, out_flat, grads) = value_and_grad_flat(&f, &flat, true, &desc)?;
        let out = unflatten_like::<(Array, X)>(&out_flat.treedef, outs, out_flat.statics)?;
        Ok((out, unflatten_like::<A>(&flat.treedef, grads, flat.statics)?))
    }
}

/// `jax.lax.stop_gradient(x)`: `x`, with zero derivative.
#[track_caller]
pub fn stop_gradient(x: &Array) -> Array {
    if !crate::trace::is_tracing() {
        return x.clone();
    }
    lax::bind1(Primitive::StopGradient, vec![Operand::Array(x.clone())]).unwrap_or_else(|e| crate::numpy::ops::fail(e, x.aval()))
}

/// The standard basis of `shape` as one array `[n, *shape]` (`n` = its size), staged as
/// `iota`/`eq`/`convert_element_type` like JAX's `_std_basis`.
fn std_basis(shape: &[usize], dtype: DType) -> Result<Array> {
    let n: usize = shape.iter().product();
    let rows = lax::iota(DType::I32, &[n, n], 0)?;
    let cols = lax::iota(DType::I32, &[n, n], 1)?;
    let eye = lax::convert_element_type(&lax::binary(Primitive::Eq, Operand::Array(rows), Operand::Array(cols))?, dtype)?;
    lax::reshape(&eye, &[vec![n], shape.to_vec()].concat())
}

/// `[n, *out]` -> `[*out, *in]`: the basis axis last, split into the input's shape.
fn basis_axis_last(t: &Array, in_shape: &[usize]) -> Result<Array> {
    let out_nd = t.ndim() - 1;
    let mut perm: Vec<usize> = (1..=out_nd).collect();
    perm.push(0);
    let t = if out_nd > 0 { lax::transpose(t, &perm)? } else { t.clone() };
    lax::reshape(&t, &[t.shape()[..out_nd].to_vec(), in_shape.to_vec()].concat())
}

/// `jax.jacfwd(f)` for `f: Array -> Array`: the Jacobian `[*out_shape, *in_shape]`, as
/// JAX computes it: `vmap` of the JVP over the standard basis of the input.
pub fn jacfwd<O: TraceOutput<Out = Array>>(f: impl Fn(Array) -> O + Clone + 'static) -> impl Fn(Array) -> Result<Array> + 'static {
    move |x: Array| {
        let f = f.clone();
        let x2 = x.clone();
        let cols = super::batching::vmap(move |t: Array| jvp(f.clone(), &x2, &t).map(|(_, t)| t))(std_basis(&x.shape(), x.dtype())?)?;
        basis_axis_last(&cols, &x.shape())
    }
}

/// `jax.jacrev(f)` for `f: Array -> Array`: the Jacobian `[*out_shape, *in_shape]`, as
/// JAX computes it: `vmap` of the VJP over the standard basis of the output.
pub fn jacrev<O: TraceOutput<Out = Array>>(f: impl Fn(Array) -> O + Clone + 'static) -> impl Fn(Array) -> Result<Array> + 'static {
    move |x: Array| {
        let mut flat = Flat::default();
        x.flatten(&mut flat);
        let (j, _) = trace_flat(&f, &flat, "f for jacrev")?;
        let out = j.jaxpr.out_avals().remove(0);
        let x2 = x.clone();
        let pull = move |u: Array| -> Result<Array> {
            let (_, c) = vjp_jaxpr(&j.jaxpr, &j.consts, std::slice::from_ref(&x2), &[Some(u)])?;
            c.into_iter().next().flatten().map(Ok).unwrap_or_else(|| zero_like(&x2))
        };
        let rows = super::batching::vmap(pull)(std_basis(&out.shape, out.dtype)?)?;
        lax::reshape(&rows, &[out.shape.clone(), x.shape()].concat())
    }
}

/// `jax.hessian(f)` = `jacfwd(jacrev(f))` for scalar `f: Array -> Array`.
pub fn hessian<O: TraceOutput<Out = Array>>(f: impl Fn(Array) -> O + Clone + 'static) -> impl Fn(Array) -> Result<Array> + 'static {
    let g = jacrev(f);
    let g = std::rc::Rc::new(g);
    jacfwd(move |x: Array| (g.clone())(x))
}

/// Evaluates a checkpoint body, keeping the values its policy saves.
fn eval_saving(j: &Jaxpr, args: &[Array], policy: crate::ir::RematPolicy) -> Result<(Vec<Array>, std::collections::HashMap<u32, Array>)> {
    let loc = Location::caller();
    let mut env: Env<Array> = Env::new();
    for (v, a) in j.invars.iter().zip(args) {
        env.set(v, a.clone());
    }
    let mut keep = std::collections::HashMap::new();
    for e in &j.eqns {
        let ops = e.inputs.iter().map(|a| super::interp::operand(&env, a)).collect::<Result<Vec<Operand>>>()?;
        let outs = bind(e.primitive.clone(), ops, loc)?;
        let save = super::custom::saveable(policy, e);
        for (v, o) in e.outputs.iter().zip(outs) {
            if save {
                keep.insert(v.id, o.clone());
            }
            env.set(v, o);
        }
    }
    let outs = j.outvars.iter().map(|a| atom_array(&env, a)).collect::<Result<Vec<_>>>()?;
    Ok((outs, keep))
}

fn zeros_of(a: &ShapedArray) -> Result<Array> {
    lax::bind1(
        Primitive::BroadcastInDim { shape: a.shape.clone(), broadcast_dimensions: vec![] },
        vec![Operand::Lit(Scalar::F64(0.0).cast(a.dtype), ShapedArray::new(&[], a.dtype))],
    )
}

/// JVP of the call-like primitives (custom rules, checkpoint); `None` for others.
fn custom_jvp_eqn(p: &Primitive, ins: &[Array], ts: &[Option<Array>]) -> Result<Option<(Vec<Array>, Vec<Option<Array>>)>> {
    match p {
        Primitive::CustomJvpCall { rule, num_consts, .. } => {
            let r = match super::custom::rule(*rule)? {
                super::custom::Rule::Jvp(r) => r,
                _ => return Err(Error::runtime("internal: custom_jvp_call with a VJP rule")),
            };
            let args = &ins[*num_consts..];
            let tin = args
                .iter()
                .zip(&ts[*num_consts..])
                .map(|(a, t)| t.clone().map(Ok).unwrap_or_else(|| zeros_of(&a.aval().strong())))
                .collect::<Result<Vec<_>>>()?;
            let (o, to) = r(args, &tin)?;
            let to = to.into_iter().zip(&o).map(|(t, x)| fit(t, &x.aval().strong()).map(Some)).collect::<Result<Vec<_>>>()?;
            Ok(Some((o, to)))
        }
        Primitive::CustomVjpCall { .. } => Err(Error::type_error(
            "can't apply forward-mode autodiff (jvp) to a custom_vjp function.",
        )),
        Primitive::Checkpoint { jaxpr, .. } => Ok(Some(jvp_jaxpr(jaxpr, &[], ins, ts)?)),
        _ => Ok(None),
    }
}

/// VJP of the call-like primitives: the user's `bwd`, the transposed user JVP, or the
/// checkpoint body recomputed now (with its policy's saved values).
fn custom_vjp_eqn(p: &Primitive, ins: &[Array], outs: &[Array], cts: &[Option<Array>], extra: &Extra) -> Result<Vec<Option<Array>>> {
    let cts_inst = cts
        .iter()
        .zip(outs)
        .map(|(c, o)| c.clone().map(Ok).unwrap_or_else(|| zeros_of(&o.aval().strong())))
        .collect::<Result<Vec<_>>>()?;
    match p {
        Primitive::CustomVjpCall { rule, num_consts, .. } => {
            let bwd = match super::custom::rule(*rule)? {
                super::custom::Rule::Vjp(_, b) => b,
                _ => return Err(Error::runtime("internal: custom_vjp_call with a JVP rule")),
            };
            let res = match extra {
                Extra::Residuals(r) => r.clone(),
                _ => return Err(Error::runtime("internal: custom_vjp residuals missing")),
            };
            let g = bwd(&res, &cts_inst)?;
            let mut out = vec![None; *num_consts];
            for (x, c) in ins[*num_consts..].iter().zip(g) {
                out.push(Some(fit(c, &x.aval().strong())?));
            }
            Ok(out)
        }
        Primitive::CustomJvpCall { rule, num_consts, .. } => {
            let r = match super::custom::rule(*rule)? {
                super::custom::Rule::Jvp(r) => r,
                _ => return Err(Error::runtime("internal: custom_jvp_call with a VJP rule")),
            };
            let args = ins[*num_consts..].to_vec();
            let avals: Vec<ShapedArray> = args.iter().map(|a| a.aval().strong()).collect();
            // The rule is linear in the tangents: its VJP in the tangents is the transpose.
            let lin = super::interp::trace_to_jaxpr("custom_jvp transpose", &avals, |t| Ok(r(&args, &t)?.1))?;
            let zeros = avals.iter().map(zeros_of).collect::<Result<Vec<_>>>()?;
            let cts_some: Vec<Option<Array>> = cts_inst.into_iter().map(Some).collect();
            let (_, g) = vjp_jaxpr(&lin.jaxpr, &lin.consts, &zeros, &cts_some)?;
            let mut out = vec![None; *num_consts];
            out.extend(g);
            Ok(out)
        }
        Primitive::Checkpoint { jaxpr, .. } => {
            let known = match extra {
                Extra::Known(k) => k.clone(),
                _ => std::collections::HashMap::new(),
            };
            let cts_some: Vec<Option<Array>> = cts_inst.into_iter().map(Some).collect();
            Ok(vjp_jaxpr_known(jaxpr, &[], ins, &cts_some, &known)?.1)
        }
        _ => Err(Error::runtime(format!("internal: {} is not a call", p.name()))),
    }
}
