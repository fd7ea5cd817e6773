//! The bridge to evcxr's display protocol: evcxr shows a cell's final expression by
//! calling `(expr).evcxr_display()`, which prints framed MIME blocks on stdout. `Ok(v)`
//! shows `v`; `Err(e)` prints one `application/vnd.jaxrepl.error+json` block that the
//! session turns into an error output. Nothing here knows about Jupyter messages.

pub use crate::trace::cells::enter_cell;

pub mod rebound;

/// A panic location as the engine shows locations: `cell N, line L` for a line of a REPL
/// cell (`trace::cells`), `file:line:column` otherwise. The session's panic hook uses it.
pub fn location_label(loc: &std::panic::Location<'_>) -> String {
    crate::trace::source_info(loc).to_string()
}

use crate::error::Error;
use crate::ir::{ClosedJaxpr, ShapeDtypeStruct};
use crate::trace::Array;
use std::io::Write;

/// Text shown for a value in a cell (`text/plain`).
pub trait TextRepr {
    fn text_repr(&self) -> String;
    /// The error to show instead of the value (a cell whose value is an array whose
    /// computation failed is an error cell, as the failure is raised in JAX).
    fn failure(&self) -> Option<Error> {
        None
    }
    /// Richer MIME renderings shown next to `text/plain` (`("image/svg+xml", svg)`, ...);
    /// Jupyter shows the richest, a terminal the text.
    fn rich(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
}

impl TextRepr for Array {
    fn text_repr(&self) -> String {
        format!("{self:?}")
    }
    fn failure(&self) -> Option<Error> {
        if self.is_tracer() {
            return None;
        }
        self.block_until_ready().err()
    }
    /// The HTML table view (`display::html`) beside JAX's repr.
    fn rich(&self) -> Vec<(&'static str, String)> {
        self.html_repr().map(|h| ("text/html", h)).into_iter().collect()
    }
}
impl TextRepr for ClosedJaxpr {
    fn text_repr(&self) -> String {
        self.to_string()
    }
}
impl TextRepr for ShapeDtypeStruct {
    fn text_repr(&self) -> String {
        self.to_string()
    }
}
impl TextRepr for crate::tree::ShapeTree {
    fn text_repr(&self) -> String {
        self.to_string()
    }
}
macro_rules! text_repr_display {
    ($($t:ty),+) => {$(
        impl TextRepr for $t {
            fn text_repr(&self) -> String {
                format!("{self:?}")
            }
        }
    )+};
}
text_repr_display!(bool, f32, f64, i32, i64, u32, u64, usize, String);
// Devices and placement: JAX's reprs (`CpuDevice(id=0)`, `Mesh(axis_sizes=…)`, `P('x',)`,
// `NamedSharding(…)`, `Shard(…)`, `ShapedArray(float32[8@x])`).
text_repr_display!(
    crate::sharding::Device,
    crate::sharding::Mesh,
    crate::sharding::PartitionSpec,
    crate::sharding::NamedSharding,
    crate::sharding::SingleDeviceSharding,
    crate::sharding::Sharding,
    crate::sharding::Shard,
    crate::sharding::ArrayType,
    crate::sharding::AxisType
);
// One line (its Debug is its Display): `Profile(12 events on 2 threads, written to …)`.
text_repr_display!(crate::profiler::Profile);
impl TextRepr for () {
    fn text_repr(&self) -> String {
        String::new()
    }
}
impl<T: TextRepr> TextRepr for Vec<T> {
    fn text_repr(&self) -> String {
        format!("[{}]", self.iter().map(|x| x.text_repr()).collect::<Vec<_>>().join(", "))
    }
}
impl<A: TextRepr, B: TextRepr> TextRepr for (A, B) {
    fn text_repr(&self) -> String {
        format!("({}, {})", self.0.text_repr(), self.1.text_repr())
    }
}
impl<A: TextRepr, B: TextRepr, C: TextRepr> TextRepr for (A, B, C) {
    fn text_repr(&self) -> String {
        format!("({}, {}, {})", self.0.text_repr(), self.1.text_repr(), self.2.text_repr())
    }
}
impl TextRepr for crate::compile::CostAnalysis {
    fn text_repr(&self) -> String {
        format!("{self}")
    }
}
impl TextRepr for crate::compile::MemoryAnalysis {
    fn text_repr(&self) -> String {
        format!("{self}")
    }
}
impl<A: crate::trace::pytree::Pytree, R: crate::trace::pytree::Pytree> TextRepr for crate::transform::Traced<A, R> {
    fn text_repr(&self) -> String {
        self.jaxpr().to_string()
    }
}
impl<A: crate::trace::pytree::Pytree, R: crate::trace::pytree::Pytree> TextRepr for crate::transform::Lowered<A, R> {
    fn text_repr(&self) -> String {
        self.as_text()
    }
}
impl<A: crate::trace::pytree::Pytree, R: crate::trace::pytree::Pytree> TextRepr for crate::transform::Compiled<A, R> {
    fn text_repr(&self) -> String {
        self.as_text()
    }
}

/// Plain text produced by magics and helpers.
#[derive(Clone, Debug, PartialEq)]
pub struct Text(pub String);
impl TextRepr for Text {
    fn text_repr(&self) -> String {
        self.0.clone()
    }
}
impl std::ops::Deref for Text {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}
impl PartialEq<str> for Text {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}
impl PartialEq<&str> for Text {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}
impl PartialEq<String> for Text {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}
impl std::fmt::Display for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What evcxr calls to show a cell's value.
pub trait EvcxrDisplay {
    fn evcxr_display(&self);
}

fn emit(mime: &str, body: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "EVCXR_BEGIN_CONTENT {mime}\n{body}\nEVCXR_END_CONTENT");
    let _ = out.flush();
}

/// JSON string literal of `s` (RFC 8259 escaping).
pub fn json_string(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// Prints `e` as the session's error block.
pub fn display_error(e: &Error) {
    emit("application/vnd.jaxrepl.error+json", &error_json(e));
}

/// The session's JSON form of an error: `{"ename","evalue","traceback":[..],"location"}`
/// (one line: newlines in texts are escaped). The display frame of `Err(e)` and the
/// `{:#?}` line of an error returned with `?` ([`ERROR_LINE_PREFIX`]) both carry it.
pub fn error_json(e: &Error) -> String {
    let mut tb = vec![format!("{}: {}", e.ename(), e.message)];
    if let Some(l) = &e.location {
        tb.push(format!("  (traced at {l})"));
    }
    let location = match &e.location {
        Some(l) => format!(
            "{{\"file\":{},\"line\":{},\"column\":{}}}",
            json_string(&l.file),
            l.line,
            l.column
        ),
        None => "null".to_string(),
    };
    format!(
        "{{\"ename\":{},\"evalue\":{},\"traceback\":[{}],\"location\":{location}}}",
        json_string(e.ename()),
        json_string(&e.message),
        tb.iter().map(|t| json_string(t)).collect::<Vec<_>>().join(",")
    )
}

/// The start of the line `{:#?}` writes for a `jax::Error` in a session: this prefix, then
/// [`error_json`]. evcxr prints an error returned with `?` from a cell with the session's
/// error format, `{:#?}`, on stderr; the session turns the line into an error output.
/// (The session repeats this literal: it does not link the engine.)
pub const ERROR_LINE_PREFIX: &str = "\x1ejaxrepl-error ";

/// Whether this process is a session's evaluation child ([`init_session`] ran).
static SESSION: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether this process is a session's evaluation child: `{:#?}` of a `jax::Error` is then
/// the session's error line ([`ERROR_LINE_PREFIX`]).
pub fn session_active() -> bool {
    SESSION.load(std::sync::atomic::Ordering::Relaxed)
}

impl<T: TextRepr> EvcxrDisplay for T {
    fn evcxr_display(&self) {
        if let Some(e) = self.failure() {
            return display_error(&e);
        }
        let t = self.text_repr();
        if !t.is_empty() {
            emit("text/plain", &t);
        }
        for (mime, body) in self.rich() {
            emit(mime, &body);
        }
    }
}

impl<T: TextRepr> EvcxrDisplay for Result<T, Error> {
    fn evcxr_display(&self) {
        match self {
            Ok(v) => v.evcxr_display(),
            Err(e) => display_error(e),
        }
    }
}

impl EvcxrDisplay for Error {
    fn evcxr_display(&self) {
        display_error(self)
    }
}

/// Prepares the evaluation child: installs the interrupt handler (SIGUSR2) and the
/// stack-overflow report (a SIGSEGV handler on an alternate stack that tells the session
/// the child died of a stack overflow: `runtime::stack_overflow`).
/// Idempotent; called by the session's prelude, on the child's main thread.
pub fn init_session() {
    SESSION.store(true, std::sync::atomic::Ordering::Relaxed);
    crate::progress::set_enabled(true);
    if let Err(e) = crate::runtime::interrupt::install_handler() {
        eprintln!("jax: could not install the interrupt handler: {e}");
    }
    if let Err(e) = crate::runtime::stack_overflow::install() {
        eprintln!("jax: could not install the stack-overflow report: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::SourceInfo;

    /// The session's error line for an error returned with `?` (the session's test parses
    /// the same literal: repl/src/session/qmark.rs).
    #[test]
    fn error_json_is_one_line_with_the_users_location() {
        let e = Error::value_error("axis 4 is out of bounds\nfor an array of rank 1")
            .at(Some(SourceInfo { file: "cell 3".into(), line: 2, column: 9 }));
        assert_eq!(
            error_json(&e),
            r#"{"ename":"ValueError","evalue":"axis 4 is out of bounds\nfor an array of rank 1","traceback":["ValueError: axis 4 is out of bounds\nfor an array of rank 1","  (traced at cell 3, line 2)"],"location":{"file":"cell 3","line":2,"column":9}}"#
        );
        // Outside a session, `{:?}` and `{:#?}` show the fields as a derived Debug would.
        if !session_active() {
            let plain = Error::type_error("bad");
            assert_eq!(format!("{plain:?}"), r#"Error { kind: Type, message: "bad", location: None }"#);
            assert!(format!("{plain:#?}").starts_with("Error {\n    kind: Type,"));
        }
    }
}
