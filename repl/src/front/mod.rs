//! The `jaxrepl` terminal front ends: the interactive prompt ([`repl`]), headless runs of
//! notebooks and `.rs` scripts ([`script`]), and plain-text rendering of outputs ([`term`]).

pub mod repl;
pub mod script;
pub mod term;
