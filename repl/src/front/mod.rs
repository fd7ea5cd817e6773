//! The `jaxrepl` terminal front ends: the interactive prompt ([`repl`]), headless runs of
//! notebooks and `.rs` scripts ([`script`]), plain-text rendering of outputs ([`term`]) and
//! syntax highlighting of Rust input and IR output ([`highlight`]).

pub mod highlight;
pub mod repl;
pub mod script;
pub mod term;
