//! Jaxpr interpreters, the machinery behind grad, vmap and control flow: trace a
//! function into a jaxpr (inside whatever traces are active), and evaluate a jaxpr by
//! binding its equations again (so the evaluation is itself staged into an enclosing
//! trace, or runs eagerly). Transformations are interpreters over these jaxprs, as in
//! JAX's autodidax.

use crate::error::{Error, Result};
use crate::ir::{Atom, Jaxpr, Primitive, ShapedArray, Var};
use crate::trace::{self, bind, Array, Operand};
use std::collections::HashMap;
use std::panic::Location;

/// A jaxpr with the values of its constvars (concrete arrays or outer tracers).
#[derive(Clone)]
pub struct OpenJaxpr {
    pub jaxpr: Jaxpr,
    pub consts: Vec<Array>,
}

/// Traces `f` on fresh tracers of `in_avals` (nested inside any active trace).
/// Errors: the first error recorded while tracing, or `f`'s own error.
pub fn trace_to_jaxpr(
    name: &str,
    in_avals: &[ShapedArray],
    f: impl FnOnce(Vec<Array>) -> Result<Vec<Array>>,
) -> Result<OpenJaxpr> {
    let names = (0..in_avals.len()).map(|i| format!("args[{i}]")).collect();
    let (id, tracers) = trace::push_trace(name, in_avals, names);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(tracers)));
    let outs = match r {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => {
            let recorded = trace::pop_trace(id, &[]).err();
            return Err(recorded.unwrap_or(e));
        }
        Err(p) => {
            trace::abandon_trace(id);
            std::panic::resume_unwind(p);
        }
    };
    let (jaxpr, consts) = trace::pop_trace(id, &outs)?;
    Ok(OpenJaxpr { jaxpr, consts })
}

/// Variable environment of an interpreter.
pub struct Env<T> {
    map: HashMap<u32, T>,
}

impl<T: Clone> Env<T> {
    pub fn new() -> Self {
        Env { map: HashMap::new() }
    }
    pub fn set(&mut self, v: &Var, x: T) {
        self.map.insert(v.id, x);
    }
    pub fn get(&self, v: &Var) -> Result<T> {
        self.map.get(&v.id).cloned().ok_or_else(|| Error::runtime(format!("internal: unbound jaxpr variable {}", v.id)))
    }
}

impl<T: Clone> Default for Env<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// An operand of an equation from the environment: variables are looked up,
/// literals stay literals.
pub fn operand(env: &Env<Array>, a: &Atom) -> Result<Operand> {
    match a {
        Atom::Var(v) => Ok(Operand::Array(env.get(v)?)),
        Atom::Lit(l) => Ok(Operand::Lit(l.value, l.aval.clone())),
    }
}

/// An atom as an array (literals become weakly typed 0-d arrays, or scalar literals
/// staged into the current trace).
pub fn atom_array(env: &Env<Array>, a: &Atom) -> Result<Array> {
    match a {
        Atom::Var(v) => env.get(v),
        Atom::Lit(l) => literal_array(l.value, &l.aval),
    }
}

/// A literal as an array of `aval` (0-d).
pub fn literal_array(v: crate::ir::Scalar, aval: &ShapedArray) -> Result<Array> {
    let buf = crate::runtime::Buffer::from_bytes(aval, &v.to_bytes(aval.dtype)).map_err(Error::runtime)?;
    Ok(Array::from_buffer(buf, aval.weak_type))
}

/// Evaluates `j` on `args` by binding each equation (nested jit calls are inlined).
#[track_caller]
pub fn eval_jaxpr(j: &Jaxpr, consts: &[Array], args: &[Array]) -> Result<Vec<Array>> {
    eval_jaxpr_mapping_errors(j, consts, args, Location::caller(), &|_, e| e)
}

/// [`eval_jaxpr`] with `on_error` applied to the error of a failing equation (e.g. to give
/// it the equation's source line; `jax_debug_nans` re-runs use this).
pub(crate) fn eval_jaxpr_mapping_errors(
    j: &Jaxpr,
    consts: &[Array],
    args: &[Array],
    loc: &'static Location<'static>,
    on_error: &dyn Fn(&crate::ir::Eqn, Error) -> Error,
) -> Result<Vec<Array>> {
    let mut env: Env<Array> = Env::new();
    for (v, c) in j.constvars.iter().zip(consts) {
        env.set(v, c.clone());
    }
    if args.len() != j.invars.len() {
        return Err(Error::type_error(format!("jaxpr takes {} arguments, got {}", j.invars.len(), args.len())));
    }
    for (v, a) in j.invars.iter().zip(args) {
        env.set(v, a.clone());
    }
    for e in &j.eqns {
        let outs = if let Primitive::Pjit { jaxpr, .. } = &e.primitive {
            let consts: Vec<Array> = jaxpr.consts.iter().map(|b| Array::from_buffer((**b).clone(), false)).collect();
            let ins = e.inputs.iter().map(|a| atom_array(&env, a)).collect::<Result<Vec<_>>>()?;
            eval_jaxpr_mapping_errors(&jaxpr.jaxpr, &consts, &ins, loc, on_error)?
        } else {
            let ops = e.inputs.iter().map(|a| operand(&env, a)).collect::<Result<Vec<_>>>()?;
            bind(e.primitive.clone(), ops, loc).map_err(|err| on_error(e, err))?
        };
        for (v, o) in e.outputs.iter().zip(outs) {
            env.set(v, o);
        }
    }
    j.outvars.iter().map(|a| atom_array(&env, a)).collect()
}
