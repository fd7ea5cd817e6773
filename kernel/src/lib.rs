//! `jaxrepl-kernel`: the Jupyter front end of jaxrepl.
//!
//! The kernel owns no session logic. It binds the five Jupyter sockets, turns each request
//! into a call on the session (`jaxrepl::Session`, through the [`backend::Backend`] trait)
//! and turns what the session reports back into Jupyter messages. Evaluation, magics,
//! display routing and interrupt semantics all live in `repl/`.
//!
//! Code map, in the order a request travels:
//! - [`wire`]: reading requests off a socket (signature checked, malformed content still
//!   answered), iopub topics, MIME bundles, error replies for requests we cannot honour.
//! - [`server`]: sockets and tasks: heartbeat echo, the single iopub owner (XPUB with
//!   `iopub_welcome`), control (interrupt, shutdown), shell (one request at a time, always
//!   `busy` → ... → reply → `idle`), SIGINT/SIGTERM, parent-death watch.
//! - [`handlers`]: one function per shell request type, translating to session calls.
//! - [`execute`]: the execute request: execution count, `execute_input`, the output
//!   router (stream / display_data / execute_result / error), the reply.
//! - [`backend`]: the [`backend::Backend`] trait the session implements, and the worker
//!   thread that owns the session so the async runtime never blocks on evaluation.
//! - [`cursor`]: Jupyter's code-point cursor positions ↔ the session's byte offsets.
//! - [`spec`]: `kernel_info_reply` and the kernelspec (`--install DIR`).
//!
//! **Invariant: every request that reaches the kernel gets exactly one reply, and every
//! shell request is bracketed by `busy` and `idle` on iopub, in that order.** No panic
//! escapes: session calls run under `catch_unwind` on the worker thread.

pub mod backend;
pub mod cursor;
pub mod execute;
pub mod handlers;
pub mod server;
pub mod spec;
pub mod wire;
