//! jaxrepl: the evaluation [`session`] (evcxr on the `jax` engine) used by the `jaxrepl`
//! terminal REPL and the Jupyter kernel, and the terminal front end itself.
//!
//! Every binary that creates a [`session::Session`] must call `evcxr::runtime_hook()` as
//! the first thing in `main`: evcxr re-executes that binary as the evaluation child.

pub mod session;

pub use session::{
    Completeness, Completions, ExecStatus, InterruptHandle, Output, Session, SessionOptions,
};

pub mod front;
