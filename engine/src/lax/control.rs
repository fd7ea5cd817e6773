//! Structured control flow: `cond`, `switch`, `while_loop`, `fori_loop`, `scan`, `map`.
//! The functions given to them are traced once into sub-jaxprs (never unrolled), their
//! closed-over values become leading operands, and the primitive is bound like any
//! other, so control flow runs eagerly, under `jit`, and under transformations.
//! See <https://docs.jax.dev/en/latest/control-flow.html>.

use crate::error::{Error, Result};
use crate::ir::{DType, Jaxpr, Primitive, ShapedArray, Var};
use crate::trace::pytree::{flatten_value, unflatten_like, ArgLeaf, Flat, Pytree, TreeDef};
use crate::trace::{Array, Operand};
use crate::transform::interp::{trace_to_jaxpr, OpenJaxpr};
use crate::transform::jit::TraceOutput;

fn types(avals: &[ShapedArray]) -> String {
    avals.iter().map(|a| a.short()).collect::<Vec<_>>().join(", ")
}

fn same(a: &[ShapedArray], b: &[ShapedArray]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.shape == y.shape && x.dtype == y.dtype)
}

/// Type rules of `cond`, `while` and `scan`.
pub fn abstract_eval(p: &Primitive, ins: &[ShapedArray]) -> Result<Vec<ShapedArray>> {
    match p {
        Primitive::Cond { branches } => {
            let idx = ins.first().ok_or_else(|| Error::type_error("cond needs an index operand"))?;
            if idx.dtype != DType::I32 || !idx.shape.is_empty() {
                return Err(Error::type_error(format!("cond index must be a scalar int32, got {}", idx.short())));
            }
            let first = branches.first().ok_or_else(|| Error::value_error("cond needs at least one branch"))?;
            for b in branches {
                if !same(&b.in_avals(), &ins[1..]) {
                    return Err(Error::type_error(format!(
                        "cond branch takes {} but is called with {}",
                        types(&b.in_avals()),
                        types(&ins[1..])
                    )));
                }
                if !same(&b.out_avals(), &first.out_avals()) {
                    // Branch 0 is false_fun (JAX's order); the text names true_fun's first.
                    let (t, f) = if branches.len() == 2 { (&branches[1], &branches[0]) } else { (b, first) };
                    return Err(Error::type_error(format!(
                        "true_fun and false_fun output must have identical types, got\n{} and {}",
                        types(&t.out_avals()),
                        types(&f.out_avals())
                    )));
                }
            }
            Ok(first.out_avals().into_iter().map(|a| a.strong()).collect())
        }
        Primitive::While { cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts } => {
            let carry = &ins[cond_nconsts + body_nconsts..];
            let c_out = cond_jaxpr.out_avals();
            if c_out.len() != 1 || c_out[0].dtype != DType::Bool || !c_out[0].shape.is_empty() {
                return Err(Error::type_error(format!(
                    "cond_fun must return a boolean scalar, but got output type(s) [{}]",
                    types(&c_out)
                )));
            }
            if !same(&body_jaxpr.out_avals(), carry) {
                return Err(Error::type_error(format!(
                    "body_fun output and input must have identical types, got\n{} and {}",
                    types(&body_jaxpr.out_avals()),
                    types(carry)
                )));
            }
            Ok(carry.to_vec())
        }
        Primitive::Scan { jaxpr, length, num_consts, num_carry, .. } => {
            let carry = &ins[*num_consts..num_consts + num_carry];
            let outs = jaxpr.out_avals();
            if outs.len() < *num_carry || !same(&outs[..*num_carry], carry) {
                return Err(Error::type_error(format!(
                    "scan carry output and input must have identical types, got\n{} and {}",
                    types(&outs[..(*num_carry).min(outs.len())]),
                    types(carry)
                )));
            }
            for x in &ins[num_consts + num_carry..] {
                if x.shape.first() != Some(length) {
                    return Err(Error::value_error(format!(
                        "scan got value with no leading axis to scan over, or a length other than {length}: {}",
                        x.short()
                    )));
                }
            }
            let mut r: Vec<ShapedArray> = carry.to_vec();
            for y in &outs[*num_carry..] {
                let mut shape = vec![*length];
                shape.extend(&y.shape);
                r.push(ShapedArray::new(&shape, y.dtype));
            }
            Ok(r)
        }
        _ => Err(Error::type_error(format!("{}: not a control-flow primitive", p.name()))),
    }
}

fn leaves(flat: &Flat) -> Result<Vec<Array>> {
    flat.leaves
        .iter()
        .map(|l| match l {
            ArgLeaf::Value(a) => Ok(a.clone()),
            ArgLeaf::Spec(_) => Err(Error::type_error("control flow needs array values")),
        })
        .collect()
}

fn flat_of<T: Pytree>(t: &T) -> Flat {
    flatten_value(t)
}

/// Traces `f` on the leaves of `arg_flat` (abstract: only their types matter).
fn trace_fn<A: Pytree, O: TraceOutput>(name: &str, f: &dyn Fn(A) -> O, arg: &Flat) -> Result<(OpenJaxpr, Flat)> {
    // The body's arguments have the operands' types (carries their initial values'), so
    // that `typeof_` inside shows their shardings.
    trace_fn_typed(name, f, arg, crate::sharding_types::leaf_types(arg), leaf_vmas(arg), 0)
}

/// The mesh axes `a` varies over in the `shard_map` body being traced (none elsewhere).
fn leaf_vma(a: &Array) -> Vec<String> {
    crate::transform::shard_map::vma_of(a).map(|(_, v)| v).unwrap_or_default()
}

/// [`leaf_vma`] of each leaf of `arg` (none for a leaf that is only a type).
fn leaf_vmas(arg: &Flat) -> Vec<Vec<String>> {
    arg.leaves
        .iter()
        .map(|l| match l {
            ArgLeaf::Value(a) => leaf_vma(a),
            ArgLeaf::Spec(_) => vec![],
        })
        .collect()
}

/// [`trace_fn`] with the arguments' sharding types given (`types[i]` for leaf i: a scan
/// body's slice of `xs` has the sharding of `xs` without its leading dim) and the first
/// `weak` leaves keeping their weak type (fori_loop's index is `~int32[]` in the body, as
/// JAX's; the other leaves are traced strong).
fn trace_fn_typed<A: Pytree, O: TraceOutput>(
    name: &str,
    f: &dyn Fn(A) -> O,
    arg: &Flat,
    types: Vec<Option<crate::sharding_types::ValueType>>,
    vmas: Vec<Vec<String>>,
    weak: usize,
) -> Result<(OpenJaxpr, Flat)> {
    let avals: Vec<ShapedArray> = arg.leaves.iter().enumerate().map(|(i, l)| if i < weak { l.aval() } else { l.aval().strong() }).collect();
    let mut out = Flat::default();
    let j = trace_to_jaxpr(name, &avals, |ts| {
        // Inside a shard_map body, the body's values vary over their operands' mesh axes.
        let _nested = crate::transform::shard_map::enter_nested(&vmas);
        crate::sharding_types::type_innermost_args(types);
        let a = unflatten_like::<A>(&arg.treedef, ts, arg.statics.clone())?;
        let r = f(a).into_result()?;
        out = flatten_value(&r);
        leaves(&out)
    })?;
    Ok((j, out))
}

/// Closure-converts branches that were traced separately: every branch takes the
/// constants of all branches as leading operands (its own used, the others ignored).
/// Returns the branch jaxprs and the constant values to pass.
pub(crate) fn merge_branches(traced: Vec<OpenJaxpr>) -> (Vec<Jaxpr>, Vec<Array>) {
    let mut consts: Vec<Array> = vec![];
    let mut const_avals: Vec<Vec<ShapedArray>> = vec![];
    for j in &traced {
        const_avals.push(j.consts.iter().map(|c| c.aval()).collect());
        consts.extend(j.consts.iter().cloned());
    }
    let mut jaxprs = vec![];
    for (k, j) in traced.iter().enumerate() {
        let mut next = max_id(&j.jaxpr) + 1;
        let mut invars: Vec<Var> = vec![];
        for (m, avals) in const_avals.iter().enumerate() {
            if m == k {
                invars.extend(j.jaxpr.constvars.clone());
            } else {
                for a in avals {
                    invars.push(Var { id: next, aval: a.clone() });
                    next += 1;
                }
            }
        }
        invars.extend(j.jaxpr.invars.clone());
        jaxprs.push(Jaxpr { constvars: vec![], invars, ..j.jaxpr.clone() });
    }
    (jaxprs, consts)
}

/// Makes the constvars of `j` leading invars (closure conversion).
pub(crate) fn close(j: &Jaxpr) -> Jaxpr {
    let mut invars = j.constvars.clone();
    invars.extend(j.invars.clone());
    Jaxpr { constvars: vec![], invars, ..j.clone() }
}

pub(crate) fn max_id(j: &Jaxpr) -> u32 {
    let mut m = 0;
    for v in j.constvars.iter().chain(&j.invars) {
        m = m.max(v.id);
    }
    for e in &j.eqns {
        for v in &e.outputs {
            m = m.max(v.id);
        }
    }
    m
}

fn ops(xs: &[Array]) -> Vec<Operand> {
    xs.iter().cloned().map(Operand::Array).collect()
}

#[track_caller]
fn bind_n(p: Primitive, operands: Vec<Operand>) -> Result<Vec<Array>> {
    crate::trace::bind(p, operands, std::panic::Location::caller())
}

/// `lax.switch(index, branches, operands)`: runs `branches[clamp(index)]`. All branches
/// must return the same types. Errors: type mismatches between branches.
#[track_caller]
pub fn switch<A: Pytree, O: TraceOutput>(index: &Array, branches: &[&dyn Fn(A) -> O], operands: A) -> Result<O::Out> {
    switch_impl(index, branches, operands, true)
}

#[track_caller]
fn switch_impl<A: Pytree, O: TraceOutput>(index: &Array, branches: &[&dyn Fn(A) -> O], operands: A, clamp: bool) -> Result<O::Out> {
    if branches.is_empty() {
        return Err(Error::value_error("switch needs at least one branch").here());
    }
    let arg = flat_of(&operands);
    let traced = branches
        .iter()
        .enumerate()
        .map(|(i, f)| trace_fn(&format!("branch {i}"), *f, &arg))
        .collect::<Result<Vec<_>>>()?;
    let out_flat = traced[0].1.clone();
    let (jaxprs, consts) = merge_branches(traced.into_iter().map(|(j, _)| j).collect());
    let idx = if index.dtype() == DType::Bool || index.dtype() != DType::I32 {
        super::convert_element_type(index, DType::I32)?
    } else {
        index.clone()
    };
    let n = branches.len() as f64;
    // lax.switch clamps the index into range.
    let idx = if clamp && branches.len() > 1 {
        let lo = super::binary(Primitive::Max, Operand::Array(idx), super::literal(crate::ir::Scalar::I32(0)))?;
        super::binary(Primitive::Min, Operand::Array(lo), super::literal(crate::ir::Scalar::I32((n - 1.0) as i32)))?
    } else {
        idx
    };
    let mut operands_v = vec![Operand::Array(idx)];
    operands_v.extend(ops(&consts));
    operands_v.extend(ops(&leaves(&arg)?));
    let p = Primitive::Cond { branches: jaxprs };
    crate::transform::shard_map::check_control_vma(&p, &operands_v, crate::transform::shard_map::ControlKind::Cond).map_err(|e| e.here())?;
    let outs = bind_n(p, operands_v)?;
    unflatten_like::<O::Out>(&out_flat.treedef, outs, out_flat.statics)
}

/// `lax.cond(pred, true_fun, false_fun, operands)`.
#[track_caller]
pub fn cond<A: Pytree, O: TraceOutput>(pred: &Array, true_fun: impl Fn(A) -> O, false_fun: impl Fn(A) -> O, operands: A) -> Result<O::Out> {
    if !pred.shape().is_empty() {
        return Err(Error::type_error(format!("Pred must be a scalar, got {} of shape {}.", pred.dtype().name(), super::py_shape(&pred.shape()))).here());
    }
    let i = super::convert_element_type(pred, DType::I32)?;
    switch_impl(&i, &[&false_fun as &dyn Fn(A) -> O, &true_fun], operands, false)
}

/// `lax.while_loop(cond_fun, body_fun, init)`: `while cond_fun(c) { c = body_fun(c) }`.
/// Errors: `cond_fun` not returning a bool scalar, `body_fun` changing the carry types.
#[track_caller]
pub fn while_loop<C: Pytree, P: TraceOutput<Out = Array>, O: TraceOutput<Out = C>>(
    cond_fun: impl Fn(C) -> P,
    body_fun: impl Fn(C) -> O,
    init: C,
) -> Result<C> {
    let arg = flat_of(&init);
    let (cj, _) = trace_fn("cond_fun", &cond_fun, &arg)?;
    let (bj, out) = trace_fn("body_fun", &body_fun, &arg)?;
    let init_leaves = leaves(&arg)?;
    let mut operands = ops(&cj.consts);
    operands.extend(ops(&bj.consts));
    operands.extend(ops(&init_leaves));
    let p = Primitive::While {
        cond_nconsts: cj.consts.len(),
        body_nconsts: bj.consts.len(),
        cond_jaxpr: Box::new(close(&cj.jaxpr)),
        body_jaxpr: Box::new(close(&bj.jaxpr)),
    };
    crate::transform::shard_map::check_control_vma(&p, &operands, crate::transform::shard_map::ControlKind::WhileLoop).map_err(|e| e.here())?;
    let outs = bind_n(p, operands)?;
    // Keep the init's weak types (body outputs are typed like the carry).
    let outs = outs
        .into_iter()
        .zip(&init_leaves)
        .map(|(o, i)| if i.weak_type() && !o.weak_type() { super::convert(Operand::Array(o), i.dtype(), true).map(|x| match x { Operand::Array(a) => a, _ => unreachable!() }) } else { Ok(o) })
        .collect::<Result<Vec<_>>>()?;
    unflatten_like::<C>(&out.treedef, outs, arg.statics)
}

/// `lax.scan(f, init, xs)`: `f(carry, x) -> (carry, y)` over the leading axis of `xs`
/// (`length` when `xs` is `()`), returning the final carry and the stacked `ys`.
#[track_caller]
pub fn scan<C: Pytree, X: Pytree, Y: Pytree, O: TraceOutput<Out = (C, Y)>>(
    f: impl Fn((C, X)) -> O,
    init: C,
    xs: X,
    length: Option<usize>,
    reverse: bool,
    unroll: usize,
) -> Result<(C, Y)> {
    scan_impl(f, init, xs, length, reverse, unroll, None)
}

/// [`scan`], with the first carry leaf bound as the literal `first_carry` (fori_loop's
/// static lower bound: JAX's jaxpr shows `scan[...] 0:i32[] a`, not a constvar).
#[track_caller]
fn scan_impl<C: Pytree, X: Pytree, Y: Pytree, O: TraceOutput<Out = (C, Y)>>(
    f: impl Fn((C, X)) -> O,
    init: C,
    xs: X,
    length: Option<usize>,
    reverse: bool,
    unroll: usize,
    first_carry: Option<crate::ir::Scalar>,
) -> Result<(C, Y)> {
    if unroll == 0 {
        // JAX's check (`unroll` is a bool or a positive int there; 1 is no unrolling).
        return Err(Error::value_error("`unroll` must be a `bool` or a positive `int`.").here());
    }
    let cflat = flat_of(&init);
    let xflat = flat_of(&xs);
    let xl = leaves(&xflat)?;
    // JAX's checks (lax.scan): every x has a leading axis, all of one size, equal to
    // `length` when it is given.
    let sizes = xl
        .iter()
        .map(|x| x.shape().first().copied().ok_or_else(|| Error::value_error("scan got a 0-d value in xs: nothing to scan over")))
        .collect::<Result<Vec<usize>>>();
    let sizes = match sizes {
        Ok(s) => s,
        Err(e) => return Err(e.here()),
    };
    let listed = || sizes.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", ");
    if sizes.windows(2).any(|w| w[0] != w[1]) {
        return Err(Error::value_error(format!("scan got values with different leading axis sizes: {}.", listed())).here());
    }
    let n = match (sizes.first(), length) {
        (Some(&s), Some(n)) if s != n => {
            return Err(Error::value_error(format!("scan got `length` argument of {n} which disagrees with leading axis sizes [{}].", listed())).here());
        }
        (Some(&s), _) => s,
        (None, Some(n)) => n,
        (None, None) => return Err(Error::value_error("scan got no xs and no length").here()),
    };
    // JAX's check in explicit-sharding mode: the body gets one slice of the leading axis,
    // which must not be split over `Explicit` mesh axes.
    for x in &xl {
        if let Some(ns) = crate::sharding::typeof_(x).sharding {
            let explicit = |a: &String| ns.mesh.axis_type(a) == Some(crate::sharding::AxisType::Explicit);
            if ns.spec.0.first().is_some_and(|e| e.0.iter().any(explicit)) {
                return Err(Error::value_error(format!("0th dimension of all xs should be replicated. Got {:?}", ns.spec)).here());
            }
        }
    }
    // The body sees one slice of each x.
    let mut arg = Flat::default();
    arg.treedef = TreeDef::tuple(vec![cflat.treedef.clone(), xflat.treedef.clone()]);
    arg.leaves = cflat.leaves.clone();
    for x in &xl {
        let mut a = x.aval();
        a.shape.remove(0);
        arg.leaves.push(ArgLeaf::Spec(a));
    }
    arg.statics = cflat.statics.iter().chain(&xflat.statics).cloned().collect();
    // Each slice of an x has the x's sharding without the scanned dim (JAX's
    // `float32[4@Y]` for a row of `float32[8,4@Y]`).
    let mut types = crate::sharding_types::leaf_types(&cflat);
    types.extend(crate::sharding_types::leaf_types(&xflat).into_iter().map(|t| {
        let mut t = t?;
        if let Some(s) = t.sharding.as_mut() {
            if !s.spec.0.is_empty() {
                s.spec.0.remove(0);
            }
        }
        Some(t)
    }));
    let mut vmas = leaf_vmas(&cflat);
    vmas.extend(xl.iter().map(leaf_vma));
    let (j, out) = trace_fn_typed("scan body", &f, &arg, types, vmas, usize::from(first_carry.is_some()))?;
    let carry_leaves = leaves(&cflat)?;
    let mut operands = ops(&j.consts);
    let mut carry_ops = ops(&carry_leaves);
    if let (Some(v), Some(first)) = (first_carry, carry_ops.first_mut()) {
        *first = Operand::Lit(v, first.aval());
    }
    operands.extend(carry_ops);
    operands.extend(ops(&xl));
    let p = Primitive::Scan {
        jaxpr: Box::new(close(&j.jaxpr)),
        length: n,
        reverse,
        unroll: unroll.max(1),
        num_consts: j.consts.len(),
        num_carry: carry_leaves.len(),
    };
    let kind = crate::transform::shard_map::ControlKind::Scan { fori: first_carry.is_some() };
    crate::transform::shard_map::check_control_vma(&p, &operands, kind).map_err(|e| e.here())?;
    let outs = bind_n(p, operands)?;
    let all_statics = out.statics.clone();
    let (c, y): (C, Y) = unflatten_like::<(C, Y)>(&out.treedef, outs, all_statics)?;
    Ok((c, y))
}

/// `lax.fori_loop(lower, upper, body, init)` with static bounds: a `scan` of
/// `upper - lower` steps carrying the loop index, as JAX lowers it.
#[track_caller]
pub fn fori_loop<C: Pytree, O: TraceOutput<Out = C>>(lower: i32, upper: i32, body: impl Fn((Array, C)) -> O, init: C) -> Result<C> {
    let n = (upper - lower).max(0) as usize;
    // Weak and of the default int type, as JAX's index from Python int bounds: `~int32[]`
    // in the body (`~int64[]` with `jax_enable_x64`).
    let (start, one, first) = if crate::config::enable_x64() {
        let b = crate::runtime::Buffer::from_slice(&ShapedArray::new(&[], DType::I64), &[lower as i64]).expect("scalar");
        (Array::from_buffer(b, true), crate::ir::Scalar::I64(1), crate::ir::Scalar::I64(lower as i64))
    } else {
        let b = crate::runtime::Buffer::from_slice(&ShapedArray::new(&[], DType::I32), &[lower]).expect("scalar");
        (Array::from_buffer(b, true), crate::ir::Scalar::I32(1), crate::ir::Scalar::I32(lower))
    };
    let ((_, c), ()) = scan_impl(
        |((i, c), ()): ((Array, C), ())| -> Result<((Array, C), ())> {
            let next = super::binary(Primitive::Add, Operand::Array(i.clone()), super::literal(one))?;
            let c2 = body((i, c)).into_result()?;
            Ok(((next, c2), ()))
        },
        (start, init),
        (),
        Some(n),
        false,
        1,
        Some(first),
    )?;
    Ok(c)
}

/// `lax.fori_loop` with traced bounds: a `while_loop` over `(i, upper, carry)`.
#[track_caller]
pub fn fori_loop_dynamic<C: Pytree, O: TraceOutput<Out = C>>(lower: &Array, upper: &Array, body: impl Fn((Array, C)) -> O, init: C) -> Result<C> {
    let lo = super::convert_element_type(lower, DType::I32)?;
    let hi = super::convert_element_type(upper, DType::I32)?;
    let (_, _, c) = while_loop(
        |(i, u, _): (Array, Array, C)| super::binary(Primitive::Lt, Operand::Array(i), Operand::Array(u)),
        |(i, u, c): (Array, Array, C)| -> Result<(Array, Array, C)> {
            let next = super::binary(Primitive::Add, Operand::Array(i.clone()), super::literal(crate::ir::Scalar::I32(1)))?;
            Ok((next, u, body((i, c)).into_result()?))
        },
        (lo, hi, init),
    )?;
    Ok(c)
}

/// `lax.map(f, xs)`: `f` applied to each slice of `xs` along axis 0, as a `scan`.
#[track_caller]
pub fn map<X: Pytree, O: TraceOutput>(f: impl Fn(X) -> O, xs: X) -> Result<O::Out> {
    let ((), ys) = scan(|((), x): ((), X)| -> Result<((), O::Out)> { Ok(((), f(x).into_result()?)) }, (), xs, None, false, 1)?;
    Ok(ys)
}
