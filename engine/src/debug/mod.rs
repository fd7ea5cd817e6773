//! `debug::print!`: print runtime values from inside traced code (JAX's
//! `jax.debug.print`), and `debug::callback`: call a Rust closure on them. Inside a trace
//! they stage a `debug_callback` equation that calls back into Rust when the compiled
//! code runs; outside they run at once. Output goes to stdout and is flushed before the
//! call that ran it returns (effects barrier), in program order: every print is
//! `ordered` in JAX's sense. Under `vmap` the callback runs once per batch element.
//!
//! Also here: `jax_debug_nans`/`jax_debug_infs` (`nans`), equation counts per source line
//! and the unrolled-loop warning (`eqn_count`), IR dumps (`dump`).

pub mod breakpoint;
pub mod dump;
pub mod eqn_count;
pub mod nans;

pub use eqn_count::{eqn_counts, unrolled_loop_warning, EqnCounts};

use crate::error::{Error, Result};
use crate::ir::{CallbackId, Primitive, ShapedArray};
use crate::runtime::{callbacks, Buffer};
use crate::trace::{bind, is_tracing, Array, Operand};
use std::collections::HashMap;
use std::io::Write;
use std::panic::Location;
use std::sync::{Arc, Mutex, OnceLock};

/// Prints with placeholders filled by the runtime values of arrays, e.g.
/// `debug::print!("x = {}, y = {:?}", x, y)`: `{}` numpy str, `{:?}` JAX repr, `{:.3}` a
/// 0-d value with 3 decimals, `{{`/`}}` literal braces. `debug::print!(ordered = true;
/// "...", x)` is accepted for JAX's `ordered=True`: our prints always run in program
/// order. A placeholder/argument count mismatch is a `ValueError` (recorded in the trace).
#[macro_export]
macro_rules! debug_print {
    (ordered = $ordered:expr; $fmt:expr $(, $arg:expr)* $(,)?) => {{
        let _: bool = $ordered;
        $crate::debug::print_values($fmt, &[$(::std::clone::Clone::clone(&$arg)),*])
    }};
    ($fmt:expr $(, $arg:expr)* $(,)?) => {
        $crate::debug::print_values($fmt, &[$(::std::clone::Clone::clone(&$arg)),*])
    };
}
pub use crate::debug_print as print;
/// `jax.debug.visualize_array_sharding`: the table as `Text`, which a cell shows as is.
pub use crate::sharding::visualize_array_sharding;
/// `jax.debug.inspect_array_sharding`: calls back with an array's sharding, inside `jit` too.
pub use crate::sharding::inspect_array_sharding;

pub use crate::debug_breakpoint as breakpoint;

/// One placeholder of a format string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Spec {
    Str,
    Repr,
    Precision(usize),
}

/// Splits `fmt` into literal text and placeholders.
/// Errors: a `{...}` that is not `{}`, `{:?}` or `{:.N}`.
fn parse_format(fmt: &str) -> Result<Vec<Result<String, Spec>>> {
    let mut parts: Vec<Result<String, Spec>> = vec![];
    let mut lit = String::new();
    let mut rest = fmt;
    while let Some(p) = rest.find(['{', '}']) {
        lit.push_str(&rest[..p]);
        let tail = &rest[p..];
        if tail.starts_with("{{") || tail.starts_with("}}") {
            lit.push_str(&tail[..1]);
            rest = &tail[2..];
            continue;
        }
        if tail.starts_with('}') {
            // A lone `}`: kept as text (Rust would reject it; be forgiving in output).
            lit.push('}');
            rest = &tail[1..];
            continue;
        }
        let end = tail.find('}').ok_or_else(|| bad_spec(fmt, tail))?;
        let spec = match &tail[1..end] {
            "" => Spec::Str,
            ":?" => Spec::Repr,
            s if s.starts_with(":.") && s[2..].parse::<usize>().is_ok() => Spec::Precision(s[2..].parse().unwrap_or(0)),
            _ => return Err(bad_spec(fmt, &tail[..=end])),
        };
        parts.push(Ok(std::mem::take(&mut lit)));
        parts.push(Err(spec));
        rest = &tail[end + 1..];
    }
    lit.push_str(rest);
    parts.push(Ok(lit));
    Ok(parts)
}

fn bad_spec(fmt: &str, at: &str) -> Error {
    Error::value_error(format!(
        "`debug::print!` format string {fmt:?} has an unsupported placeholder {at:?}; use {{}} (value), {{:?}} (repr) or {{:.N}} (N decimals of each element), and {{{{ }}}} for literal braces"
    ))
}

/// Checks that `fmt` has one placeholder per argument (`avals`), as JAX's format checks.
/// Errors: `ValueError: Unused positional arguments to `debug::print!`: [f32[3]]` and
/// the converse for too few arguments.
pub fn check_format(fmt: &str, avals: &[ShapedArray]) -> Result<()> {
    let n = parse_format(fmt)?.iter().filter(|p| p.is_err()).count();
    if avals.len() > n {
        let unused: Vec<String> = avals[n..].iter().map(|a| a.short()).collect();
        return Err(Error::value_error(format!(
            "Unused positional arguments to `debug::print!`: [{}]. The format string {fmt:?} has {n} placeholder{}.",
            unused.join(", "),
            if n == 1 { "" } else { "s" }
        )));
    }
    if avals.len() < n {
        return Err(Error::value_error(format!(
            "`debug::print!` format string {fmt:?} has {n} placeholders but {} argument{} given",
            avals.len(),
            if avals.len() == 1 { " was" } else { "s were" }
        )));
    }
    Ok(())
}

/// Formats `fmt` with the values of `bufs` (see `debug::print!`). A placeholder without a
/// value is kept as text; `{:.N}` of an array writes every element with N decimals, in
/// numpy's nested brackets (`[0.00 1.00 2.00]`; JAX's Python format raises a TypeError
/// there, Rust's `{:.2?}` of a `Vec<f32>` formats each element: we follow Rust).
pub fn format_buffers(fmt: &str, bufs: &[Buffer]) -> String {
    let parts = match parse_format(fmt) {
        Ok(p) => p,
        Err(_) => return fmt.to_string(),
    };
    let mut out = String::new();
    let mut i = 0;
    for p in parts {
        match p {
            Ok(text) => out.push_str(&text),
            Err(spec) => {
                let Some(b) = bufs.get(i) else {
                    out.push_str(match spec {
                        Spec::Repr => "{:?}",
                        _ => "{}",
                    });
                    continue;
                };
                i += 1;
                match spec {
                    Spec::Str => out.push_str(&crate::display::array_str_of(b)),
                    Spec::Repr => out.push_str(&crate::display::array_repr_of(b, false)),
                    Spec::Precision(n) if b.shape().is_empty() => {
                        let v = b.to_f64_vec()[0];
                        out.push_str(&format!("{v:.n$}"));
                    }
                    Spec::Precision(n) => out.push_str(&fixed_decimals(&b.to_f64_vec(), b.shape(), n)),
                }
            }
        }
    }
    out
}

/// `values` (row-major, of `shape`, rank ≥ 1) with `decimals` digits after the point each,
/// right-aligned to the widest, in numpy's nested brackets with one row per line
/// (`[[1.00 2.00]\n [3.00 4.00]]`).
fn fixed_decimals(values: &[f64], shape: &[usize], decimals: usize) -> String {
    let texts: Vec<String> = values.iter().map(|v| format!("{v:.decimals$}")).collect();
    let width = texts.iter().map(|t| t.len()).max().unwrap_or(0);
    fn nest(texts: &[String], shape: &[usize], width: usize, depth: usize, out: &mut String) {
        out.push('[');
        let n = shape[0];
        let inner: usize = shape[1..].iter().product();
        for i in 0..n {
            if shape.len() == 1 {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(&format!("{:>width$}", texts[i]));
            } else {
                if i > 0 {
                    // numpy: one line break per inner rank, then indent past the brackets.
                    out.push_str(&"\n".repeat(shape.len() - 1));
                    out.push_str(&" ".repeat(depth + 1));
                }
                nest(&texts[i * inner..(i + 1) * inner], &shape[1..], width, depth + 1, out);
            }
        }
        out.push(']');
    }
    let mut out = String::new();
    if shape.contains(&0) {
        return "[]".to_string();
    }
    nest(&texts, shape, width, 0, &mut out);
    out
}

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
    let line = format_buffers(fmt, bufs);
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
            eprintln!("{}", eager_report(&e));
        }
    }
}

/// The text an eager `debug::print!` failure prints (nothing returns it): the error and the
/// line of the call, `ValueError: … (at cell 3, line 2)`.
fn eager_report(e: &Error) -> String {
    let at = e.location.as_ref().map(|s| format!(" (at {})", s.line_label())).unwrap_or_default();
    format!("{e}{at}")
}

/// `print_values` returning its error.
#[track_caller]
pub fn try_print_values(fmt: &str, args: &[Array]) -> Result<()> {
    // Taken here: `Location::caller()` inside the closure below would be this line.
    let loc = Location::caller();
    check_format(fmt, &args.iter().map(|a| a.aval()).collect::<Vec<_>>())
        .map_err(|e| e.at(Some(crate::trace::source_info(loc))))?;
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

/// `jax.debug.callback`: calls `f` with the runtime values of `args` (concrete arrays).
/// Inside a trace it stages a `debug_callback` equation (run when the compiled code
/// runs, in program order, once per element under `vmap`); outside it calls `f` now.
/// A panic in `f` is caught and reported on stderr. Like JAX's, the callback returns
/// nothing to the computation and is not differentiated (under `grad` it sees the
/// forward values). Errors: a failure recorded in the trace, or a pending computation's error.
#[track_caller]
pub fn callback(f: impl Fn(&[Array]) + Send + Sync + 'static, args: &[Array]) -> Result<()> {
    let loc = Location::caller();
    if is_tracing() {
        let f = Arc::new(f);
        let id = callbacks::register(Arc::new(move |bufs: &[Buffer]| {
            let arrays: Vec<Array> = bufs.iter().map(|b| Array::from_buffer(b.clone(), false)).collect();
            f(&arrays)
        }));
        let ops = args.iter().cloned().map(Operand::Array).collect();
        bind(Primitive::DebugCallback { callback: id, fmt: String::new() }, ops, loc)?;
        return Ok(());
    }
    let bufs = args.iter().map(|a| a.buffer().map(|b| (*b).clone())).collect::<Result<Vec<_>>>()?;
    let arrays: Vec<Array> = bufs.into_iter().map(|b| Array::from_buffer(b, false)).collect();
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&arrays))).is_err() {
        eprintln!("jax: debug::callback panicked");
    }
    Ok(())
}

/// The callback `vmap` stages for `debug_callback` `inner`: splits each operand flagged
/// in `batched` along its leading axis of size `size` and calls `inner` once per element
/// (unbatched operands passed whole), so each element prints its own line, as in JAX.
pub(crate) fn batched_callback(inner: CallbackId, batched: Vec<bool>, size: usize) -> CallbackId {
    callbacks::register(Arc::new(move |bufs: &[Buffer]| {
        for i in 0..size {
            let row: Vec<Buffer> = bufs
                .iter()
                .zip(&batched)
                .map(|(b, &is_b)| if is_b { row_of(b, i, size) } else { b.clone() })
                .collect();
            callbacks::fire(inner, row);
        }
    }))
}

fn row_of(b: &Buffer, i: usize, size: usize) -> Buffer {
    let aval = ShapedArray { shape: b.shape()[1..].to_vec(), ..b.aval().clone() };
    let n = b.bytes().len() / size.max(1);
    Buffer::from_bytes(&aval, &b.bytes()[i * n..(i + 1) * n]).unwrap_or_else(|_| Buffer::zeros(&aval))
}

/// `with jax.disable_jit():` — jitted functions run eagerly, op by op on concrete values,
/// until the guard is dropped (`let _g = disable_jit();`). Process-wide.
pub fn disable_jit() -> crate::config::FlagGuard {
    crate::config::scoped("jax_disable_jit", true).expect("known flag")
}
/// `with jax.debug_nans(on):` — sets `jax_debug_nans` until the guard is dropped.
pub fn debug_nans(on: bool) -> crate::config::FlagGuard {
    crate::config::scoped("jax_debug_nans", on).expect("known flag")
}
/// `with jax.debug_infs(on):` — sets `jax_debug_infs` until the guard is dropped.
pub fn debug_infs(on: bool) -> crate::config::FlagGuard {
    crate::config::scoped("jax_debug_infs", on).expect("known flag")
}
/// `with jax.check_tracer_leaks():` — sets `jax_check_tracer_leaks` until the guard is dropped.
pub fn check_tracer_leaks() -> crate::config::FlagGuard {
    crate::config::scoped("jax_check_tracer_leaks", true).expect("known flag")
}

#[cfg(test)]
mod tests {
    /// An eager placeholder-count error names the line of the `debug::print!` call.
    #[test]
    fn eager_print_errors_name_the_line() {
        let x = crate::numpy::arange(3.0);
        let line = line!() + 1;
        let e = super::try_print_values("a={} b={}", &[x]).unwrap_err();
        let text = super::eager_report(&e);
        assert!(text.starts_with("ValueError: `debug::print!` format string \"a={} b={}\" has 2 placeholders but 1 argument was given"), "{text}");
        assert!(text.ends_with(&format!(" (at engine/src/debug/mod.rs:{line})")), "{text}");
    }
}

