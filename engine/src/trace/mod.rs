//! Tracing: the trace stack and `bind`, the one entry point of every primitive.
//!
//! With an empty stack a primitive runs eagerly (a one-equation jaxpr, compiled once per
//! signature and dispatched asynchronously). Inside `jit`/`make_jaxpr` every primitive is
//! staged into the innermost trace ("omnistaging"): concrete arrays it meets become
//! constvars. Invariant: an operator never panics while tracing; the first error is kept
//! in the trace with the user's line and returned by the traced call.

pub mod array;
pub mod cells;
pub mod metadata;
pub mod pytree;

use crate::error::{Error, ErrorKind, Result};
use crate::ir::{Atom, Eqn, Jaxpr, Literal, Primitive, Scalar, ShapedArray, SourceInfo, Var};
pub use array::Array;
use array::Repr;
use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::Location;
use std::sync::Arc;

/// A traced value: a variable of the jaxpr being built by trace `trace_id`.
#[derive(Clone, Debug)]
pub struct Tracer {
    pub trace_id: u64,
    pub var: Var,
    /// Shared by every tracer of the trace: a count above zero after the trace ended means
    /// a tracer leaked (`jax_check_tracer_leaks`).
    #[allow(dead_code)] // held for its reference count only
    alive: Arc<()>,
}

/// The state of one trace (one `jit`/`make_jaxpr` being traced).
pub struct Builder {
    pub id: u64,
    /// The traced function's name, for error messages.
    pub name: String,
    pub invars: Vec<Var>,
    /// How each invar is named in messages (`x`, `args[1]`).
    pub arg_names: Vec<String>,
    pub eqns: Vec<Eqn>,
    /// Values the traced function closed over: concrete arrays, or tracers of an
    /// enclosing trace (a transformation traced inside `jit`, say).
    pub consts: Vec<(Var, Array)>,
    const_index: HashMap<(u64, usize), usize>,
    next_var: u32,
    /// The first error raised while tracing.
    pub error: Option<Error>,
    /// Cloned into each tracer of this trace (leak detection).
    token: Arc<()>,
    /// The types of the arguments beyond their avals, one per invar (`None`: unknown or
    /// plain), when some is sharded or in pinned host memory (a `jit` call's arguments, a
    /// loop body's carries): `typeof_` of a tracer propagates them through the equations
    /// traced so far (`set_arg_types`).
    arg_types: Vec<Option<crate::sharding_types::ValueType>>,
}

thread_local! {
    static STACK: RefCell<Vec<Builder>> = const { RefCell::new(Vec::new()) };
}

fn next_trace_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(1);
    N.fetch_add(1, Ordering::Relaxed)
}

/// Converts a `#[track_caller]` location into the jaxpr's source info (a REPL cell's
/// line for a location in a cell's generated crate: `cells`).
pub fn source_info(loc: &Location<'_>) -> SourceInfo {
    if let Some(s) = cells::map_location(loc) {
        return s;
    }
    SourceInfo { file: loc.file().to_string(), line: loc.line(), column: loc.column() }
}

/// Whether a trace is active on this thread.
pub fn is_tracing() -> bool {
    STACK.with(|s| !s.borrow().is_empty())
}

/// Starts a trace with one invar per aval; returns the trace id and the tracers.
pub fn push_trace(name: &str, in_avals: &[ShapedArray], arg_names: Vec<String>) -> (u64, Vec<Array>) {
    let id = next_trace_id();
    let mut b = Builder {
        id,
        name: name.to_string(),
        invars: vec![],
        arg_names,
        eqns: vec![],
        consts: vec![],
        const_index: HashMap::new(),
        next_var: 0,
        error: None,
        token: Arc::new(()),
        arg_types: vec![],
    };
    let token = b.token.clone();
    let tracers = in_avals
        .iter()
        .map(|a| {
            let v = b.new_var(a.clone());
            b.invars.push(v.clone());
            Array(Repr::Tracer(Tracer { trace_id: id, var: v, alive: token.clone() }))
        })
        .collect();
    STACK.with(|s| s.borrow_mut().push(b));
    (id, tracers)
}

/// Records the types of trace `id`'s arguments (one per invar) for `typeof_` of its tracers.
pub(crate) fn set_arg_types(id: u64, types: Vec<Option<crate::sharding_types::ValueType>>) {
    STACK.with(|s| {
        if let Some(b) = s.borrow_mut().iter_mut().find(|b| b.id == id) {
            b.arg_types = types;
        }
    });
}

/// Whether some trace on this thread has typed arguments (`set_arg_types`): only then
/// (or with a mesh set) can a tracer's type carry a sharding or memory space.
pub(crate) fn has_typed_args() -> bool {
    STACK.with(|s| s.borrow().iter().any(|b| b.arg_types.iter().any(|t| t.is_some())))
}

/// `partial_jaxpr(t)` with the trace's constants as leading invars, and the types of its
/// invars (the constants' own, an enclosing trace's tracer's by `typeof_`; then the
/// arguments' recorded by `set_arg_types`, `None` where not recorded); `None` when `t`'s
/// trace has ended.
pub(crate) fn partial_jaxpr_with_types(t: &Tracer) -> Option<(Jaxpr, Vec<Option<crate::sharding_types::ValueType>>)> {
    let (_, mut j) = partial_jaxpr(t)?;
    let (consts, args) = STACK.with(|s| {
        let s = s.borrow();
        let b = s.iter().find(|b| b.id == t.trace_id)?;
        let consts: Vec<Array> = b.consts.iter().map(|(_, a)| a.clone()).collect();
        let args: Vec<Option<crate::sharding_types::ValueType>> = (0..b.invars.len()).map(|i| b.arg_types.get(i).cloned().flatten()).collect();
        Some((consts, args))
    })?;
    let mut types: Vec<Option<crate::sharding_types::ValueType>> = consts.iter().map(crate::sharding::value_type).collect();
    types.extend(args);
    let mut invars = std::mem::take(&mut j.constvars);
    invars.append(&mut j.invars);
    j.invars = invars;
    Some((j, types))
}

/// The mesh of the first sharded argument of the innermost trace with typed arguments
/// (`set_arg_types`): inside `jit`, the mesh the call's arguments are on.
pub(crate) fn traced_args_mesh() -> Option<crate::sharding::Mesh> {
    STACK.with(|s| {
        s.borrow()
            .iter()
            .rev()
            .find_map(|b| b.arg_types.iter().flatten().find_map(|t| t.sharding.as_ref().map(|n| n.mesh.clone())))
    })
}

/// Ends the innermost trace, making a jaxpr whose outputs are `outs`.
/// Errors: the first error recorded while tracing; an output that is not a value of this
/// trace (a tracer leaked from elsewhere).
pub fn pop_trace(id: u64, outs: &[Array]) -> Result<(Jaxpr, Vec<Array>)> {
    // Outputs that are concrete arrays become constvars of this trace first.
    let atoms: Vec<Result<Atom>> = outs.iter().map(|o| to_atom_in_top(o)).collect();
    let b = STACK.with(|s| s.borrow_mut().pop()).expect("trace stack underflow");
    debug_assert_eq!(b.id, id);
    if let Some(e) = b.error {
        return Err(e);
    }
    let outvars = atoms.into_iter().collect::<Result<Vec<_>>>()?;
    let (constvars, consts): (Vec<Var>, Vec<Array>) = b.consts.into_iter().unzip();
    Ok((Jaxpr { constvars, invars: b.invars, eqns: b.eqns, outvars }, consts))
}

/// A handle on trace `id`'s tracers (valid before it is popped): after the trace ended,
/// `strong_count()` is the number of its tracers still alive (leaked).
pub fn trace_liveness(id: u64) -> Option<std::sync::Weak<()>> {
    STACK.with(|s| s.borrow().iter().find(|b| b.id == id).map(|b| Arc::downgrade(&b.token)))
}

/// The error for a tracer used after its trace ended (JAX's `UnexpectedTracerError`).
pub fn unexpected_tracer(t: &Tracer) -> Error {
    Error::new(
        ErrorKind::UnexpectedTracer,
        format!(
            "Encountered an unexpected tracer. A function transformed by JAX had a side effect, allowing for a \
             reference to an intermediate value with type {} wrapped in a tracer to escape the scope of the \
             transformation. Return the value from the function instead of storing it outside (in a Vec, a static, \
             a captured RefCell); `config::update(\"jax_check_tracer_leaks\", true)` finds where it leaked.",
            t.var.aval.short()
        ),
    )
}

/// Abandons the innermost trace (after a panic in the traced function).
pub fn abandon_trace(id: u64) {
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        if s.last().map(|b| b.id) == Some(id) {
            s.pop();
        }
    });
}

impl Builder {
    fn new_var(&mut self, aval: ShapedArray) -> Var {
        let v = Var { id: self.next_var, aval };
        self.next_var += 1;
        v
    }
}

fn to_atom_in_top(a: &Array) -> Result<Atom> {
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        let outer: Vec<u64> = s.iter().map(|b| b.id).collect();
        let b = s.last_mut().expect("no trace");
        atom_for(b, a, &outer)
    })
}

/// The atom for `a` in trace `b`: its own tracers are variables; concrete arrays and
/// tracers of enclosing traces (`outer` lists the live trace ids) become constvars.
fn atom_for(b: &mut Builder, a: &Array, outer: &[u64]) -> Result<Atom> {
    let key = match &a.0 {
        Repr::Tracer(t) if t.trace_id == b.id => return Ok(Atom::Var(t.var.clone())),
        Repr::Tracer(t) if outer.contains(&t.trace_id) => (t.trace_id, t.var.id as usize),
        Repr::Device(d) => (0, Arc::as_ptr(d) as usize),
        Repr::Tracer(_) => {
            return Err(Error::new(
            ErrorKind::UnexpectedTracer,
            format!(
                "a traced value from another (enclosing or finished) trace reached the trace of {}. \
                 Pass it as an argument instead of capturing it in the closure (JAX: UnexpectedTracerError).",
                b.name
            ),
            ))
        }
    };
    if let Some(&i) = b.const_index.get(&key) {
        return Ok(Atom::Var(b.consts[i].0.clone()));
    }
    let v = b.new_var(a.aval());
    b.const_index.insert(key, b.consts.len());
    b.consts.push((v.clone(), a.clone()));
    Ok(Atom::Var(v))
}

/// An operand of `bind`: an array (concrete or traced) or an inline scalar literal.
#[derive(Clone, Debug)]
pub enum Operand {
    Array(Array),
    Lit(Scalar, ShapedArray),
}

impl Operand {
    pub fn aval(&self) -> ShapedArray {
        match self {
            Operand::Array(a) => a.aval(),
            Operand::Lit(_, a) => a.clone(),
        }
    }
}

/// Applies `prim` to `operands`: staged into the innermost trace, or run eagerly.
/// Errors: the primitive's type rule (with the user's line), compilation failures.
/// While tracing, an error is also recorded in the trace (so operators that cannot
/// return `Result` still surface it) and placeholder tracers are returned.
pub fn bind(prim: Primitive, operands: Vec<Operand>, loc: &Location<'_>) -> Result<Vec<Array>> {
    let in_avals: Vec<ShapedArray> = operands.iter().map(|o| o.aval()).collect();
    let out_avals = crate::lax::shape::abstract_eval(&prim, &in_avals).map_err(|e| e.at(Some(source_info(loc))));
    drop(in_avals);
    if is_tracing() {
        let src = source_info(loc);
        return STACK.with(|s| {
            let mut s = s.borrow_mut();
            let live: Vec<u64> = s.iter().map(|b| b.id).collect();
            let b = s.last_mut().unwrap();
            let out_avals = match out_avals {
                Ok(o) => o,
                Err(e) => {
                    if b.error.is_none() {
                        b.error = Some(e.clone());
                    }
                    return Err(e);
                }
            };
            let mut inputs = Vec::with_capacity(operands.len());
            for o in &operands {
                match o {
                    Operand::Array(a) => match atom_for(b, a, &live) {
                        Ok(at) => inputs.push(at),
                        Err(e) => {
                            let e = e.at(Some(src.clone()));
                            if b.error.is_none() {
                                b.error = Some(e.clone());
                            }
                            return Err(e);
                        }
                    },
                    Operand::Lit(v, aval) => inputs.push(Atom::Lit(Literal { value: *v, aval: aval.clone() })),
                }
            }
            let outputs: Vec<Var> = out_avals.into_iter().map(|a| b.new_var(a)).collect();
            let id = b.id;
            let token = b.token.clone();
            b.eqns.push(Eqn {
                primitive: prim,
                inputs,
                outputs: outputs.clone(),
                source: Some(src),
                name_stack: crate::profiler::current_name_stack(),
                metadata: metadata::current_metadata(),
            });
            Ok(outputs.into_iter().map(|v| Array(Repr::Tracer(Tracer { trace_id: id, var: v, alive: token.clone() }))).collect())
        });
    }
    let out_avals = out_avals?;
    crate::runtime::interrupt::check().map_err(|e| e.at(Some(source_info(loc))))?;
    if let (Primitive::DevicePut { memory_kind }, [Operand::Array(a)]) = (&prim, operands.as_slice()) {
        // Eagerly (an interpreted jaxpr, `jax_disable_jit`): the real move between kinds.
        return crate::sharding::device_put(a, *memory_kind).map(|r| vec![r]);
    }
    if crate::debug::nans::enabled() {
        let p = prim.clone();
        let outs = crate::transform::eager::apply(prim, operands, out_avals).map_err(|e| e.at(Some(source_info(loc))))?;
        crate::debug::nans::check_eager(&p, &outs).map_err(|e| e.at(Some(source_info(loc))))?;
        return Ok(outs);
    }
    // Eagerly, the source location is only built for an error (it allocates).
    crate::transform::eager::apply(prim, operands, out_avals).map_err(|e| e.at(Some(source_info(loc))))
}

/// Records `e` in the innermost trace (if any) and returns a placeholder of `aval` so an
/// operator can continue; outside a trace returns `None` (the caller panics with `e`).
pub fn record_error(e: Error, aval: ShapedArray) -> Option<Array> {
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        let b = s.last_mut()?;
        if b.error.is_none() {
            b.error = Some(e);
        }
        let v = b.new_var(aval);
        Some(Array(Repr::Tracer(Tracer { trace_id: b.id, var: v, alive: b.token.clone() })))
    })
}

/// The id of the innermost trace, when tracing.
pub(crate) fn innermost_trace_id() -> Option<u64> {
    STACK.with(|s| s.borrow().last().map(|b| b.id))
}

/// The id of the trace the innermost one is nested in, if any.
pub(crate) fn parent_trace_id() -> Option<u64> {
    STACK.with(|s| {
        let s = s.borrow();
        s.len().checked_sub(2).map(|k| s[k].id)
    })
}

/// The values trace `id` has closed over so far (its constvars' values, in order).
pub(crate) fn trace_consts(id: u64) -> Option<Vec<Array>> {
    STACK.with(|s| s.borrow().iter().find(|b| b.id == id).map(|b| b.consts.iter().map(|(_, a)| a.clone()).collect()))
}

/// For a tracer of a live trace: that trace's id and its jaxpr so far (its invars, the
/// values it closed over as constvars, the equations recorded until now) with the tracer
/// as the one outvar. `None`: the trace is gone.
pub(crate) fn partial_jaxpr(t: &Tracer) -> Option<(u64, Jaxpr)> {
    STACK.with(|s| {
        let s = s.borrow();
        let b = s.iter().find(|b| b.id == t.trace_id)?;
        let constvars = b.consts.iter().map(|(v, _)| v.clone()).collect();
        Some((b.id, Jaxpr { constvars, invars: b.invars.clone(), eqns: b.eqns.clone(), outvars: vec![Atom::Var(t.var.clone())] }))
    })
}

/// Trace `id`'s jaxpr so far (as [`partial_jaxpr`]) with `outs`, variables of it, as
/// outvars. `None`: the trace is gone.
pub(crate) fn trace_jaxpr_with_outs(id: u64, outs: Vec<Var>) -> Option<Jaxpr> {
    STACK.with(|s| {
        let s = s.borrow();
        let b = s.iter().find(|b| b.id == id)?;
        let constvars = b.consts.iter().map(|(v, _)| v.clone()).collect();
        Some(Jaxpr { constvars, invars: b.invars.clone(), eqns: b.eqns.clone(), outvars: outs.into_iter().map(Atom::Var).collect() })
    })
}

/// For a tracer of the innermost trace: the names of the arguments it depends on, and
/// the traced function's name (for TracerBoolConversionError messages).
pub fn tracer_provenance(t: &Tracer) -> Option<(String, Vec<String>)> {
    STACK.with(|s| {
        let s = s.borrow();
        let b = s.iter().find(|b| b.id == t.trace_id)?;
        let mut deps: std::collections::HashSet<u32> = [t.var.id].into_iter().collect();
        for e in b.eqns.iter().rev() {
            if e.outputs.iter().any(|o| deps.contains(&o.id)) {
                for i in &e.inputs {
                    if let Atom::Var(v) = i {
                        deps.insert(v.id);
                    }
                }
            }
        }
        let names = b
            .invars
            .iter()
            .enumerate()
            .filter(|(_, v)| deps.contains(&v.id))
            .map(|(i, _)| b.arg_names.get(i).cloned().unwrap_or_else(|| format!("args[{i}]")))
            .collect();
        Some((b.name.clone(), names))
    })
}
