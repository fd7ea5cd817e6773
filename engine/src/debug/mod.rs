//! `debug::print!`: print runtime values from inside traced code (JAX's
//! `jax.debug.print`). Inside a trace it stages a `debug_callback` equation that calls
//! back into Rust when the compiled code runs; outside it prints at once. Output goes
//! to stdout and is flushed before the call that ran it returns (effects barrier).

use crate::error::Result;
use crate::ir::{CallbackId, Primitive};
use crate::runtime::{callbacks, Buffer};
use crate::trace::{bind, is_tracing, Array, Operand};
use std::collections::HashMap;
use std::io::Write;
use std::panic::Location;
use std::sync::{Arc, Mutex, OnceLock};

/// Prints with `{}` placeholders filled by the runtime values of arrays, e.g.
/// `debug::print!("x = {}, y = {:?}", x, y)` (`{}`: numpy str, `{:?}`: JAX repr).
#[macro_export]
macro_rules! debug_print {
    ($fmt:expr $(, $arg:expr)* $(,)?) => {
        $crate::debug::print_values($fmt, &[$(::std::clone::Clone::clone(&$arg)),*])
    };
}
pub use crate::debug_print as print;
/// `jax.debug.visualize_array_sharding` (returns the table; print it).
pub use crate::sharding::visualize_array_sharding;

/// Formats `fmt` with the values of `args` (each `{}` → str, `{:?}` → repr).
pub fn format_values(fmt: &str, values: &[String], reprs: &[String]) -> String {
    let mut out = String::new();
    let mut i = 0;
    let mut rest = fmt;
    while let Some(p) = rest.find('{') {
        out.push_str(&rest[..p]);
        let tail = &rest[p..];
        if tail.starts_with("{{") {
            out.push('{');
            rest = &tail[2..];
        } else if tail.starts_with("{}") {
            out.push_str(values.get(i).map(|s| s.as_str()).unwrap_or("{}"));
            i += 1;
            rest = &tail[2..];
        } else if tail.starts_with("{:?}") {
            out.push_str(reprs.get(i).map(|s| s.as_str()).unwrap_or("{:?}"));
            i += 1;
            rest = &tail[4..];
        } else {
            out.push('{');
            rest = &tail[1..];
        }
    }
    out.push_str(&rest.replace("}}", "}"));
    out
}

fn print_buffers(fmt: &str, bufs: &[Buffer]) {
    let strs: Vec<String> = bufs.iter().map(crate::display::array_str_of).collect();
    let reprs: Vec<String> = bufs.iter().map(|b| crate::display::array_repr_of(b, false)).collect();
    let line = format_values(fmt, &strs, &reprs);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// One callback id per format string, so retracing an identical function lowers to an
/// identical module (and hits the executable cache).
fn callback_for(fmt: &str) -> CallbackId {
    static IDS: OnceLock<Mutex<HashMap<String, CallbackId>>> = OnceLock::new();
    let mut ids = IDS.get_or_init(|| Mutex::new(HashMap::new())).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&id) = ids.get(fmt) {
        return id;
    }
    let f = fmt.to_string();
    let id = callbacks::register(Arc::new(move |bufs: &[Buffer]| print_buffers(&f, bufs)));
    ids.insert(fmt.to_string(), id);
    id
}

/// The function behind `debug::print!`. A failure is recorded in the trace (and returned
/// by the traced call) or, eagerly, printed to stderr.
#[track_caller]
pub fn print_values(fmt: &str, args: &[Array]) {
    if let Err(e) = try_print_values(fmt, args) {
        if crate::trace::record_error(e.clone(), crate::ir::ShapedArray::scalar(crate::ir::DType::Bool)).is_none() {
            eprintln!("{e}");
        }
    }
}

/// `print_values` returning its error.
#[track_caller]
pub fn try_print_values(fmt: &str, args: &[Array]) -> Result<()> {
    if is_tracing() {
        let id = callback_for(fmt);
        let ops = args.iter().cloned().map(Operand::Array).collect();
        bind(Primitive::DebugCallback { callback: id, fmt: fmt.to_string() }, ops, Location::caller())?;
        return Ok(());
    }
    let bufs = args.iter().map(|a| a.buffer().map(|b| (*b).clone())).collect::<Result<Vec<_>>>()?;
    print_buffers(fmt, &bufs);
    Ok(())
}
