//! `jax_debug_nans` / `jax_debug_infs`: every output of an eager op or a jitted call is
//! checked for NaN (or Inf). An eager op that makes one is a `FloatingPointError` at the
//! user's line; a jitted call that returns one is re-run op by op ("de-optimized", as
//! JAX does), so the error names the first primitive that produced the value and the
//! line that staged it.
//!
//! Checking waits for each result, so these flags make dispatch synchronous: they are
//! debugging aids, off by default.

use crate::config;
use crate::error::{Error, ErrorKind, Result};
use crate::ir::{ClosedJaxpr, Jaxpr, Primitive};
use crate::runtime::Buffer;
use crate::trace::Array;
use std::panic::Location;

/// Whether either check is on.
pub fn enabled() -> bool {
    config::debug_nans() || config::debug_infs()
}

/// `"nan"` or `"inf"` if `buf` is a float buffer holding one that the flags look for.
fn bad_value(buf: &Buffer) -> Option<&'static str> {
    if !buf.dtype().is_float() {
        return None;
    }
    let (nans, infs) = (config::debug_nans(), config::debug_infs());
    let vals = buf.to_f64_vec();
    if nans && vals.iter().any(|v| v.is_nan()) {
        return Some("nan");
    }
    if infs && vals.iter().any(|v| v.is_infinite()) {
        return Some("inf");
    }
    None
}

fn floating_point_error(kind: &str, what: &str) -> Error {
    Error::new(ErrorKind::FloatingPoint, format!("invalid value ({kind}) encountered in {what}"))
}

/// Checks the outputs of eager primitive `prim` (waits for them).
/// Errors: `FloatingPointError: invalid value (nan) encountered in log`.
pub(crate) fn check_eager(prim: &Primitive, outs: &[Array]) -> Result<()> {
    for o in outs {
        if let Some(kind) = bad_value(&*o.buffer()?) {
            return Err(floating_point_error(kind, prim.name()));
        }
    }
    Ok(())
}

/// Checks the outputs of jitted function `name`; on a NaN/Inf prints JAX's banner and
/// re-runs `jaxpr` on `inputs` op by op to find the first primitive that made it.
/// Errors: the `FloatingPointError` naming that primitive, at the line that staged it.
pub(crate) fn check_jit(name: &str, jaxpr: &ClosedJaxpr, inputs: &[Array], outs: &[Array]) -> Result<()> {
    let mut found = None;
    for o in outs {
        if let Some(kind) = bad_value(&*o.buffer()?) {
            found = Some(kind);
            break;
        }
    }
    let Some(kind) = found else { return Ok(()) };
    eprintln!("Invalid {kind} value encountered in the output of jit({name}). Calling the de-optimized version.");
    if inputs.iter().any(|a| a.is_deleted()) {
        return Err(floating_point_error(kind, &format!("the output of jit({name}) (a donated input is gone, so it cannot be re-run op by op)")));
    }
    let consts: Vec<Array> = jaxpr.consts.iter().map(|b| Array::from_buffer((**b).clone(), false)).collect();
    eval_checked(&jaxpr.jaxpr, &consts, inputs)?;
    // Every op's output was finite: the value came straight from an input or a constant.
    Err(floating_point_error(kind, &format!("the output of jit({name}) (it is an input or a constant)")))
}

/// Evaluates `j` one equation at a time, each an eager op checked by `check_eager`; the
/// first failure gets the equation's source line.
fn eval_checked(j: &Jaxpr, consts: &[Array], args: &[Array]) -> Result<Vec<Array>> {
    crate::transform::interp::eval_jaxpr_mapping_errors(j, consts, args, Location::caller(), &|e, mut err| {
        if err.kind == ErrorKind::FloatingPoint {
            err.location = e.source.clone();
        }
        err
    })
}
