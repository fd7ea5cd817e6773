//! `jax::Error`: every engine failure is a value, never a panic.
//!
//! The kinds mirror the exception types a JAX user sees (`TypeError`,
//! `TracerBoolConversionError`, ...) so notebooks read the same; `ename()` gives that name.
//! Errors raised while tracing carry the user's source line (`#[track_caller]`).

use crate::ir::SourceInfo;
use std::fmt;

/// The kind of an engine error; `Error::ename` is the JAX exception name it corresponds to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Wrong types or shapes for an operation (JAX: `TypeError`).
    Type,
    /// Bad argument values, such as an axis out of range (JAX: `ValueError`).
    Value,
    /// A traced value was converted to a Rust bool (JAX: `TracerBoolConversionError`).
    TracerBoolConversion,
    /// A traced value was needed as a concrete number (JAX: `ConcretizationTypeError`).
    Concretization,
    /// MLIR lowering, a pass pipeline or native code generation failed.
    Compile,
    /// Execution failed, or a deleted (donated) array was used (JAX: `RuntimeError`).
    Runtime,
    /// The user interrupted engine work (Ctrl-C, Jupyter interrupt).
    Interrupted,
    /// A NaN or Inf was produced under `jax_debug_nans`/`jax_debug_infs` (JAX: `FloatingPointError`).
    FloatingPoint,
    /// A tracer escaped its trace (JAX: `UnexpectedTracerError`; leak checks say `Exception`).
    UnexpectedTracer,
    /// A feature that exists in JAX's model but not for these arguments (JAX: `NotImplementedError`).
    NotImplemented,
    /// An operation's result cannot be sharded as its inputs ask (JAX: `ShardingTypeError`,
    /// explicit-sharding mode).
    ShardingType,
    /// A check that acts as an assert failed (JAX: `AssertionError`, e.g.
    /// `with_sharding_constraint` on an all-`Explicit` mesh).
    Assertion,
    /// A `PartitionSpec` maps one mesh axis to two dimensions (JAX: `DuplicateSpecError`).
    DuplicateSpec,
}

/// An engine error: a kind, a message, and where in the user's code it arose.
///
/// `{:?}` shows the fields; `{:#?}` in a REPL/Jupyter session (after
/// `jax::interactive::init_session`) is the session's one-line error frame
/// (`interactive::ERROR_LINE_PREFIX` + JSON), which the session shows as an error output:
/// the session sets evcxr's error format to `{:#?}`, so an error returned with `?` from a
/// cell arrives as that frame (docs/engine-api.md, "Errors in cells").
#[derive(Clone, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
    pub location: Option<SourceInfo>,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error { kind, message: message.into(), location: None }
    }
    pub fn type_error(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Type, message)
    }
    pub fn value_error(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Value, message)
    }
    pub fn compile(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Compile, message)
    }
    pub fn runtime(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Runtime, message)
    }
    pub fn interrupted() -> Error {
        Error::new(ErrorKind::Interrupted, "interrupted by the user; the session's variables are kept")
    }
    /// The interrupt of a wait for a computation already running on a device: compiled code
    /// cannot be stopped part-way, so it runs to its end in the background (its result
    /// fills the array it was computing, as JAX's asynchronous dispatch would).
    pub fn interrupted_wait() -> Error {
        Error::new(
            ErrorKind::Interrupted,
            "interrupted by the user while waiting for a computation; the session's variables are kept. \
             The computation itself cannot be stopped part-way: it keeps running in the background until it ends \
             (a CPU stays busy meanwhile; using its result, or work queued behind it on the same device, waits for it to end)",
        )
    }
    /// Attaches the user's source location. An existing location is kept, unless it lies in
    /// the engine's own sources (a `bind` from engine code that is not `#[track_caller]`,
    /// such as an interpreter's loop) and `loc` does not: that location is never the user's
    /// line, so `loc` (an equation's traced line, a call site) replaces it.
    pub fn at(mut self, loc: Option<SourceInfo>) -> Error {
        let replace = match (&self.location, &loc) {
            (None, _) => true,
            (Some(old), Some(new)) => engine_file(&old.file) && !engine_file(&new.file),
            (Some(_), None) => false,
        };
        if replace {
            self.location = loc;
        }
        self
    }

    /// Attaches the caller's location (keeps an existing one): called from a
    /// `#[track_caller]` chain that starts in the user's code, it is the user's line (a
    /// REPL cell's `cell N, line L`, `trace::cells`). For errors raised before `bind`
    /// (argument checks), which would otherwise carry no line.
    /// A location inside the engine's own sources (a caller that is not `#[track_caller]`)
    /// is not the user's line and is not attached.
    #[track_caller]
    pub fn here(self) -> Error {
        let loc = std::panic::Location::caller();
        if let Some(cell) = crate::trace::cells::map_location(loc) {
            return self.at(Some(cell));
        }
        if engine_file(loc.file()) {
            return self;
        }
        self.at(Some(crate::trace::source_info(loc)))
    }

    /// The JAX exception name: `TypeError`, `TracerBoolConversionError`, ...
    pub fn ename(&self) -> &'static str {
        match self.kind {
            ErrorKind::Type => "TypeError",
            ErrorKind::Value => "ValueError",
            ErrorKind::TracerBoolConversion => "TracerBoolConversionError",
            ErrorKind::Concretization => "ConcretizationTypeError",
            ErrorKind::Compile => "CompileError",
            ErrorKind::Runtime => "RuntimeError",
            ErrorKind::Interrupted => "KeyboardInterrupt",
            ErrorKind::FloatingPoint => "FloatingPointError",
            ErrorKind::UnexpectedTracer => "UnexpectedTracerError",
            ErrorKind::NotImplemented => "NotImplementedError",
            ErrorKind::ShardingType => "ShardingTypeError",
            ErrorKind::Assertion => "AssertionError",
            ErrorKind::DuplicateSpec => "DuplicateSpecError",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.ename(), self.message)
    }
}

impl std::error::Error for Error {}

/// `{:?}`: `Error { kind: Value, message: "…", location: None }` (the session reads this
/// form back when evcxr shows a cell's `Err(e)` value with Debug:
/// `repl/src/session/render.rs`, `debug_fallback_error`); `{:#?}` in a session: the
/// session's error line.
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() && crate::interactive::session_active() {
            return write!(f, "{}{}", crate::interactive::ERROR_LINE_PREFIX, crate::interactive::error_json(self));
        }
        f.debug_struct("Error")
            .field("kind", &self.kind)
            .field("message", &self.message)
            .field("location", &self.location)
            .finish()
    }
}

/// Whether `file` (a `Location`'s file) is one of the engine's own sources: it lies in the
/// directory of this file (`file!()` is `engine/src/error.rs` in our workspace, absolute
/// when the engine is a path dependency, as in the REPL).
pub(crate) fn engine_file(file: &str) -> bool {
    let here = file!();
    let dir = here.strip_suffix("error.rs").unwrap_or(here);
    file.starts_with(dir)
}

/// `Result` with `jax::Error`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// The form the session reads back (`repl/src/session/render.rs` tests the same text).
    #[test]
    fn debug_of_an_err_is_the_form_the_session_reads() {
        let e = Error::value_error("Jitted function has static_argnums=(5,), but only accepts 2 positional arguments.");
        let r: std::result::Result<(), Error> = Err(e);
        assert_eq!(
            format!("{r:?}"),
            "Err(Error { kind: Value, message: \"Jitted function has static_argnums=(5,), but only accepts 2 positional arguments.\", location: None })"
        );
        let e = Error::runtime("x").at(Some(SourceInfo { file: "cell 19".into(), line: 7, column: 13 }));
        assert_eq!(format!("{e:?}"), "Error { kind: Runtime, message: \"x\", location: Some(SourceInfo { file: \"cell 19\", line: 7, column: 13 }) }");
    }
}
